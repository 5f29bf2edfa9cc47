// A sequence classifier over planned memory, for any model family (models/backbone.h): the
// family's backbone and head + its loss (cross-entropy, or BCE / MSE on float targets), with
// explicit forward and backward passes. The parameters (HF names), adapters, the 16-bit weight
// shadow, inputs and loss are handled here, the same for every family; the family's BackboneModel
// runs the layers.
//
// Memory is planned, then bound: the classifier first adds every buffer it needs (parameters,
// gradients, activations for the largest batch, inputs, workspace) to an ArenaPlan; the caller
// allocates one Arena (with the optimizer's state in the same plan) and binds. Nothing is
// allocated afterwards. Usage:
//   SequenceClassifier model(spec, {.max_batch = 32, .max_seq = 128, .training = true});
//   ArenaPlan plan; model.add_to_plan(plan); optimizer.add_to_plan(plan, model.params());
//   Arena arena(device, std::move(plan)); model.bind(arena); optimizer.bind(arena);
//   model.set_batch(batch); model.forward(dropout); model.loss(); model.backward(dropout);
//
// Adapters (options.adapters, PEFT's LoRA / DoRA): the base model is frozen and only the adapter
// parameters and the head (PEFT's modules_to_save) train. They are the trainable parameters:
// trainable_params() / trainable_values() / trainable_grads() are what the optimizer, clipping and
// zeroing see (without adapters: every parameter, the same as params() / param_values() /
// param_grads()). Layout of "param/values": [base parameters | adapter parameters]; the trainable
// range is its tail from the first trained head parameter, so it is one flat range; "grad/values"
// covers only that range (no gradient memory for frozen weights). After loading the base weights,
// call init_adapters(seed) (PEFT's initialisation) or load an adapter (models/peft_adapter.h).
//
// Mixed precision (options.compute bf16 / f16, autocast semantics; models/bert/encoder.h): the fp32
// parameters are the master weights; "shadow/layers" holds the encoder layers' weights in the
// compute type for the GEMMs (the family's gemm_weight_range). In full fine-tuning the optimizer
// writes it in its own update pass (optimizer_shadow(): the shadow is a sub-range of the trainable
// parameters, AdamW::apply takes it with its offset) and weights_updated(true) keeps it; otherwise
// (weights written by a loader, frozen_weights_changed(); an optimizer that did not write it,
// weights_updated()) a cast pass rewrites it before the next forward.
//
// Frozen weights stay 16-bit (frozen_16bit(): LoRA adapters with bf16 / f16 compute): the frozen
// layers' GEMM weights (the rank-2 parameters of gemm_weight_range) are stored once, in the
// compute type ("param/layers16", what the GEMMs read), with no fp32 copy, and so are the
// embedding tables before the layers (the family's ModuleKind::Embedding modules: token, position
// and token-type tables, "param/embeddings16", read by the embedding lookup, ops/embedding.h) and
// a causal LM's untied head ("param/head16", read by the fused loss, ops/lm_head_loss.h); the
// other parameters stay fp32 in three buffers (the embeddings' LayerNorm before the layers, the
// layers' biases and norms, the head and adapters after them). param(name) views each where it
// lives (a 16-bit view for those GEMM weights: loaders and savers convert, core/memory.h
// convert_copy); param_values() is undefined. DoRA keeps the fp32 base (its weight norms and its
// dropout GEMM read fp32 weights).
#pragma once

#include <optional>
#include <vector>

#include <memory>

#include "core/arena.h"
#include "core/buffer_table.h"
#include "models/backbone.h"
#include "models/batch.h"
#include "models/causal_lm_loss.h"

namespace ftune {

struct ClassifierOptions {
  int64_t max_batch = 32;
  int64_t max_seq = 128;
  bool training = true;    // plan gradients and the activations the backward pass needs
  AdapterConfig adapters;  // method none: full fine-tuning
  GradientCheckpointing checkpointing = GradientCheckpointing::Off;
  DType compute = DType::F32;  // mixed precision: bf16 (or f16) GEMM activations and weight shadow
  // Where it runs: sizes the kernels' workspace (a CPU-sized one also serves CUDA, in chunks).
  Device device = Device::cpu();
  // The run's attention kernel: cuDNN (with a GPU and 16-bit compute) plans its small state per
  // layer instead of the probabilities (models/bert/encoder.h, ops/attention_cudnn.h).
  AttentionKernel attention = AttentionKernel::Ftune;
  // Packed batches (data/token_batch.h): up to max_tokens real tokens of up to max_batch rows, no
  // padding (the family must support it). Padded: max_batch x max_seq (max_tokens is ignored).
  bool packed = false;
  int64_t max_tokens = 0;
  // Tokens x longest row of any batch at most, when smaller than tokens() x max_seq (a run's
  // planned batches, train/run_micro_batches.h): the saved attention probabilities; 0: that.
  int64_t max_token_positions = 0;
  // Plan the inputs set_batch() copies into (ids, types, positions, mask or row starts, labels,
  // targets); false when every batch comes through use_inputs() (a training run's staged
  // micro-batches and evaluation batches, train/input_staging.h), so nothing planned stays unused.
  bool own_inputs = true;
  // With frozen_16bit(): the frozen embedding tables stored in 16 bits too (the default); off
  // keeps them in fp32 (the reference its tests compare against).
  bool embeddings_16bit = true;
  // The last layer past attention for the first tokens alone where the family's head reads only
  // those (BackboneShape::first_token_head; the same logits and gradients, less work); off keeps
  // the whole last hidden state in hidden() (what the parity tests compare with HF's).
  bool first_token_head = true;

  int64_t tokens() const { return packed ? max_tokens : max_batch * max_seq; }
};

// The loss over the head's K logits (docs/rerankers.md): softmax cross-entropy over K
// >= 2 classes (ops/cross_entropy.h, against the labels), or a score loss against the batch's
// float targets (B, K): binary cross-entropy with logits (K = 1: a reranker's score on 0/1 or soft
// targets; K > 1: multi-label, ops/bce_with_logits.h) or mean squared error (regression, teacher
// scores: ops/mse_loss.h). Score losses count the rows whose label is not -100.
enum class LossKind { CrossEntropy, Bce, Mse };
const char* loss_kind_name(LossKind kind);  // "cross_entropy", "bce", "mse"

struct LossOptions {
  LossKind kind = LossKind::CrossEntropy;
  float label_smoothing = 0.0f;      // cross-entropy only
  std::vector<float> class_weights;  // empty: unweighted (cross-entropy only)
  // > 0: a loss over consecutive groups of this many rows (train/group_sampler.h) instead of a
  // pointwise one: listwise softmax cross-entropy (ops/listwise_loss.h; training.loss listwise),
  // the labels as relevance (kind CrossEntropy, K = 2) or the float targets (kind Bce, K = 1: a
  // one-score head's 0/1 relevance); or, with margin_mse (kind Mse, K = 1), MarginMSE against the
  // targets as teacher scores (ops/margin_mse_loss.h; training.loss margin_mse).
  int64_t listwise_group_size = 0;
  bool margin_mse = false;
  // A causal LM (ModelInfo::causal_lm; models/causal_lm_loss.h): the loss divides the summed
  // token losses by this (the tokens counted over the optimizer step's micro-batches) when > 0,
  // else by the batch's own count (a mean). The other fields do not apply.
  double lm_normalizer = 0;
};

class SequenceClassifier {
 public:
  SequenceClassifier(ModelSpec spec, ClassifierOptions options);

  const ModelSpec& spec() const { return spec_; }
  const ModelInfo& config() const { return spec_.info(); }
  const ClassifierOptions& options() const { return options_; }
  const ParamTable& params() const { return params_; }

  void add_to_plan(ArenaPlan& plan) const;
  void bind(const Arena& arena);
  Device device() const { return all_values_.device; }

  // The base model's parameters (HF names, as saved and loaded by hf_checkpoint.h): flat (P) f32;
  // undefined with frozen_16bit() (use param(name)).
  TensorView param_values() const { return values_; }
  // Every buffer that holds parameter values (base, head, adapters; fp32 and 16-bit): what must be
  // carried through an arena rebuild.
  std::vector<TensorView> weight_storage() const;
  // The frozen layers' GEMM weights are stored only in the compute type (see above).
  bool frozen_16bit() const { return frozen16_; }
  // Whether base parameter `name` is stored in the compute type (frozen_16bit(): the layers' GEMM
  // weights, the embedding tables, a causal LM's untied head).
  bool param_is_16bit(const std::string& name) const;
  // Gradients of every base parameter: full fine-tuning only (undefined with adapters or for
  // inference); use trainable_grads().
  TensorView param_grads() const { return adapters_on() ? TensorView() : grads_; }

  // What the optimizer trains: adapters + head with adapters, else every parameter.
  const ParamTable& trainable_params() const { return adapters_on() ? trainable_ : params_; }
  TensorView trainable_values() const { return adapters_on() ? trainable_values_ : values_; }
  TensorView trainable_grads() const { return grads_; }  // undefined for inference
  // The adapter parameters alone (PEFT names without "base_model.model.").
  const ParamTable& adapter_params() const { return adapter_params_; }
  bool adapters_on() const { return options_.adapters.enabled(); }

  // A parameter (base or adapter) by name, and the gradient of a trainable one.
  TensorView param(const std::string& name) const;
  TensorView grad(const std::string& name) const {
    return ParamTable::slice(grads_, trainable_params().at(name));
  }

  // PEFT's adapter initialisation (adapters.h); the base weights must be loaded.
  void init_adapters(uint64_t seed);
  // Call after writing base weights directly (loaders do): DoRA caches ||W||^2 of them.
  void frozen_weights_changed() {
    frozen_cache_valid_ = false;
    shadow_valid_ = false;
  }
  // Mixed precision, full fine-tuning: the 16-bit shadow of the encoder layers' weights and the
  // offset of its first element in trainable_values(), for an optimizer that writes the updated
  // weights into it in the same pass (AdamW::apply). An undefined view otherwise: fp32 has no
  // shadow, and with adapters the base weights it holds are frozen.
  struct OptimizerShadow {
    TensorView view;
    int64_t offset = 0;
  };
  OptimizerShadow optimizer_shadow() const;
  // Call after the optimizer updates the parameters. shadow_written: it also wrote
  // optimizer_shadow() (or skipped the step, leaving weights and shadow alike), so the shadow is
  // as valid as before the step; otherwise it is rewritten by a cast before the next forward.
  // With adapters the base weights are frozen: the shadow stays valid.
  void weights_updated(bool shadow_written = false) {
    if (!adapters_on() && !shadow_written) shadow_valid_ = false;
  }

  // Validates the batch against the model and the planned size, computes position ids and copies
  // the inputs into the arena (packed when the model is planned for packed batches).
  void set_batch(const Batch& batch);
  // A batch already laid out (data/token_batch.h), in the layout the model is planned for.
  void set_batch(const TokenBatch& batch);
  // Points the model at a batch already on its device (the trainer's staged inputs, ordered on the
  // compute stream by the caller, train/input_staging.h): ids, type ids, position ids and mask (or
  // cu_seqlens) of the tokens and B labels (and a score task's (B, K) f32 targets), validated by
  // the caller (validate_batch). No copy, no synchronisation. set_batch() returns to the model's
  // own input buffers.
  void use_inputs(const TokenInputs& inputs, TensorView labels, TensorView targets = {});
  int64_t batch_size() const { return inputs_.B; }
  int64_t seq_len() const { return inputs_.T; }

  // Brings what forward() refreshes lazily up to date now: DoRA's frozen-weight caches, the 16-bit
  // weight shadow after weights changed, and (with labels) the class weights of `loss` on the
  // device. forward() and loss() call it themselves; the trainer calls it before a captured CUDA
  // graph replays a forward pass, since a replay repeats only what was captured
  // (train/step_graphs.h).
  void prepare_forward(const LossOptions& loss);
  // Forward pass over the current batch; returns the logits (B, K).
  TensorView forward(const DropoutPlan& dropout);
  // The last hidden state of the last forward: (B, T, C) padded, (N, C) packed; (B, 1, C), the
  // first tokens', where the family computed only those (ClassifierOptions::first_token_head).
  TensorView hidden() const { return model_->hidden(); }
  TensorView logits() const { return logits_; }

  // The mean loss (options.kind) of the last forward against the batch's labels or targets: a
  // 1-element device tensor. A score loss needs a batch with targets (InputError otherwise).
  TensorView loss(const LossOptions& options);
  // A causal LM: the tokens the last loss() counted (labels not -100).
  int64_t lm_counted_tokens() const { return lm_loss_.counted(); }
  // A causal LM after forward() on a padded batch with token labels: each row's summed negative
  // log-likelihood over its counted tokens (the loss through the head on that row's tokens alone).
  std::vector<double> lm_row_nll();
  // Backward from the loss, scaled by loss_scale (with gradient accumulation: this micro-batch's
  // share of the step's loss, e.g. its rows / the step's rows); parameter gradients accumulate
  // into param_grads().
  // loss_scale_at (optional, in memory on the model's device): a further factor, read when the
  // kernel runs (the trainer's per-micro-batch share: core/philox.h MicroParams).
  void backward(const DropoutPlan& dropout, float loss_scale = 1.0f,
                const float* loss_scale_at = nullptr);
  void zero_grad();

 private:
  TokenInputs current_inputs() const;  // the input buffers cut to the current batch
  void refresh_weight_caches();         // DoRA's frozen caches and the 16-bit shadow
  void copy_class_weights(const LossOptions& options);
  // The classifier's own buffers (parameters, gradients, shadow, inputs, loss) and the family's.
  void buffers(BufferTable& table) const;

  ModelSpec spec_;
  ClassifierOptions options_;
  std::vector<AdapterSite> sites_;  // the family's adaptable modules
  std::unique_ptr<BackboneModel> model_;
  ParamTable params_, adapter_params_, trainable_;
  TensorView values_, grads_, trainable_values_;
  int64_t trainable_offset_ = 0;  // start of the trainable range in "param/values"
  std::pair<int64_t, int64_t> gemm_range_{0, 0};  // the family's gemm_weight_range
  // frozen_16bit(): the buffers before the layer range (the 16-bit embedding tables, table
  // embed_tables_, and the fp32 rest, embed_rest_), the fp32 ones inside it (its rank-1
  // parameters, table layer_vectors_), and the chain of views over them and the 16-bit GEMM
  // weights.
  bool frozen16_ = false;
  // A causal LM's untied frozen head in 16 bits ("param/head16", table head16_; empty otherwise).
  ParamTable layer_vectors_, embed_tables_, embed_rest_, head16_;
  TensorView embed_values_, embed16_values_, vector_values_, head16_values_;
  ParamViews tail_views_, head16_views_, embed_views_, embed16_views_, vector_views_,
      layers16_views_;
  bool frozen_cache_valid_ = false;
  TensorView shadow_;  // mixed precision: the GEMM weights in the compute type
  bool shadow_valid_ = false;
  AdapterSet adapters_;
  TokenInputs inputs_, own_inputs_;  // current / the arena's input buffers
  std::vector<int32_t> host_cu_;     // packed set_batch: the host copy of cu_seqlens
  TensorView own_labels_, own_targets_;
  bool class_weights_copied_ = false;  // class_weights_ holds loss_options_.class_weights
  TensorView labels_, targets_, class_weights_, probs_, loss_, dlogits_;
  TensorView all_values_, logits_;
  LossOptions loss_options_;
  // A causal LM's objective (ModelInfo::causal_lm): forward gives hidden states, the labels are
  // per token (N), and this is the loss through the LM head.
  bool lm_ = false;
  CausalLmLoss lm_loss_;
  bool has_labels_ = false;
  bool has_targets_ = false;
};

}  // namespace ftune
