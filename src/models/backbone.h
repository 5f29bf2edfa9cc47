// The backbone interface: what a model family (BERT / RoBERTa / XLM-R today; DeBERTa-v3,
// ModernBERT and decoder LMs next) implements so that training, planning, FLOP counting, HF
// checkpoints, PEFT adapters and prediction work for it without knowing its config type.
//
// A family is two objects:
//   Backbone       one configured model (config.json): its numbers (ModelInfo), its parameter
//                  table under HF names, its adapter sites as data, its FLOPs per token, its
//                  position-id rule, and a factory for
//   BackboneModel  the same model over planned memory: one BufferTable lists its activation
//                  buffers (planned and bound from the same list), bind() points it at the
//                  parameters, and forward / backward run over a TokenInputs batch, padded or
//                  packed, from token ids to logits (pooling and the classification head are the
//                  family's, as in HF's *ForSequenceClassification).
// ModelSpec is the value handle everything outside models/ holds. load_model_spec (hf_checkpoint.h)
// picks the family from config.json's model_type through the registry below.
//
// Gradient rule of every family: parameter gradients accumulate (+=), activation gradients
// overwrite (=).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/buffer_table.h"
#include "core/philox.h"
#include "models/adapter_config.h"
#include "models/param_table.h"
#include "ops/attention_cudnn.h"
#include "ops/dropout.h"

namespace ftune {

// What code outside models/ may know of a model: numbers every transformer classifier has, named
// as HF configs name them.
struct ModelInfo {
  std::string model_type;    // config.json's model_type: "bert", "roberta", "xlm-roberta", ...
  std::string architecture;  // "BertForSequenceClassification", ...
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t num_heads = 0;     // query heads
  int64_t num_kv_heads = 0;  // key / value heads (GQA); num_heads without it
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t type_vocab_size = 0;  // 0: the family reads no token types
  int64_t max_position_embeddings = 0;
  int64_t max_tokens = 0;  // the longest sequence its positions allow (RoBERTa: P - pad - 1)
  int64_t pad_token_id = 0;
  float hidden_dropout = 0, attention_dropout = 0, classifier_dropout = 0;
  std::vector<std::string> id2label;  // its size is num_labels
  // Packed (padding-free) batches: the family's forward handles TokenInputs with cu_seqlens.
  bool packing = false;
  // A causal language model (Backbone::as_causal_lm, HF's *ForCausalLM): forward gives the
  // final hidden states (N, C) instead of logits, the labels are one next-token id per token,
  // and the loss is the fused chunked one through `lm_head` (ops/lm_head_loss.h): the parameter
  // that holds the (V, C) projection ("lm_head.weight", or the input embedding when tied),
  // soft-capped at lm_softcap (Gemma 2's final_logit_softcapping; 0: off).
  bool causal_lm = false;
  std::string lm_head;
  float lm_softcap = 0;

  int64_t num_labels() const { return static_cast<int64_t>(id2label.size()); }
};

// training.hidden_dropout / attention_dropout / classifier_dropout; negative keeps the config's.
struct DropoutRates {
  float hidden = -1, attention = -1, classifier = -1;
};

// An adaptable linear module (a PEFT target): its frozen weight is `module + ".weight"` (out, in)
// in the parameter table, its bias `module + ".bias"` when the family has one. Modules outside
// the layers (BERT's pooler.dense) take a layer index past the last one.
struct AdapterSite {
  int64_t layer = 0;
  int kind = 0;        // index in the family's per-layer list of adaptable modules
  std::string module;  // "bert.encoder.layer.0.attention.self.query"
  int64_t in = 0, out = 0;
};

// The shape numbers the training FLOP count needs (train/flops.h has the formula): per layer the
// attention projections (query and output C x q_hidden, key and value C x kv_hidden), the
// feed-forward (2 or, gated, 3 matrices of C x F), the attention products over `window` keys at
// most, and DeBERTa's relative-position terms.
struct FlopModel {
  int64_t layers = 0;        // L
  int64_t hidden = 0;        // C
  int64_t intermediate = 0;  // F
  int64_t num_labels = 0;    // K
  int64_t q_hidden = 0;      // query / attention-output width (heads x head_dim); 0: C
  int64_t kv_hidden = 0;     // key / value width (GQA: kv_heads x head_dim); 0: q_hidden
  bool gated_ffn = false;    // SwiGLU / GeGLU: gate, up and down projections
  int64_t window = 0;        // sliding-window attention span; 0: the whole sequence
  // Per layer (size L, overriding `window`): models whose layers alternate local and global
  // attention (Mistral's uniform window needs only `window`).
  std::vector<int64_t> layer_windows;
  // DeBERTa's disentangled attention: `relative_terms` products (c2p, p2c) of each query (key)
  // with the relative-position keys (queries) over `relative_span` buckets (2 x att_span).
  int64_t relative_span = 0;
  int relative_terms = 0;
};

// The dropout masks of one forward / backward pass. Keys are (seed, site, offset) with offset the
// optimizer step (fresh masks every step); within a step, element (b, t, c) of a (B, T, inner)
// activation draws stream element ((row0 + b) * stream_seq + t) * inner + c (ops/dropout.h), so a
// micro-batch cut from rows [row0, row0 + B) of the step batch gets the same masks on its tokens
// as the whole step batch would, whatever its padded length T — or its packing: a packed row b
// draws from the same stream place as padded. The defaults (row0 0, stream_seq 0 = T) give the
// flat index.
struct DropoutPlan {
  bool training = false;
  uint64_t seed = 0;
  uint32_t offset = 0;     // the optimizer step
  uint64_t row0 = 0;       // the micro-batch's first row in the step batch
  int64_t stream_seq = 0;  // Tv >= T, a run constant; 0: the batch's own T
  // Training step: offset and row0 in device memory (read by the kernels instead of the two
  // fields above; core/philox.h), so a captured CUDA graph replays any micro-batch of its shape.
  const MicroParams* micro = nullptr;
};

// A batch of tokens on the model's device (data/token_batch.h is its host form). Padded layout:
// B rows of T positions (N = B * T), `mask` marks the real tokens. Packed layout (T == 0): the
// rows' real tokens back to back, row b's tokens are [cu[b], cu[b + 1]) of N, no padding at all.
struct TokenInputs {
  int64_t B = 0, T = 0;
  TensorView ids, type_ids, pos_ids, mask;  // (N) i32 each; mask: padded layout only
  // Packed layout: row starts (B + 1) on the device and the same on the host (per-row loops),
  // the token count and the longest row.
  TensorView cu_seqlens;
  const int32_t* host_cu_seqlens = nullptr;
  int64_t N = 0;
  int64_t max_len = 0;

  bool packed() const { return T == 0; }
  int64_t tokens() const { return packed() ? N : B * T; }
};
using EncoderInputs = TokenInputs;

// Where the (N, inner) activations of `in` draw from the dropout streams of `d` (ops/dropout.h):
// B rows of padded length T, or packed rows at their cu_seqlens.
DropoutRows dropout_rows(const DropoutPlan& d, const TokenInputs& in);

// What a BackboneModel is planned for.
struct BackboneShape {
  int64_t max_rows = 0;    // rows of a batch
  int64_t max_seq = 0;     // positions of the longest row
  int64_t max_tokens = 0;  // tokens of a batch (padded: max_rows x max_seq)
  // Tokens x longest row of a batch at most (the saved attention probabilities, ops/attention.h);
  // 0: max_tokens x max_seq.
  int64_t max_token_positions = 0;
  bool training = false;   // gradients and what backward reads
  bool packed = false;     // packed batches (probabilities planned per row segment)
  GradientCheckpointing checkpointing = GradientCheckpointing::Off;
  AdapterConfig adapters;
  DType compute = DType::F32;     // mixed precision: bf16 / f16 GEMM activations
  Device device = Device::cpu();  // sizes the kernels' workspace
  AttentionKernel attention = AttentionKernel::Ftune;
  // Nothing reads the last layer's output but the head, and the head reads only each row's first
  // token: a family may compute its last layer past attention for the first tokens alone
  // (BERT / RoBERTa / XLM-R and DeBERTa, models/layers/first_token_rows.h); hidden() is then
  // (B, 1, C).
  bool first_token_head = false;
};

// Views of the parameters of a table inside a flat buffer that holds the table's elements
// [base, base + flat.numel()): the values, their gradients or the 16-bit weight shadow.
struct ParamViews {
  const ParamTable* table = nullptr;
  TensorView flat;
  int64_t base = 0;
  // Where a parameter this buffer lacks is looked up next (parameters held in several buffers:
  // the fp32 ones of a model whose frozen GEMM weights are stored only in 16 bits).
  const ParamViews* next = nullptr;
  // The parameter `name`, shaped as in the table; undefined when the table or the buffer lacks it
  // (a frozen parameter's gradient).
  TensorView get(const std::string& name) const;
  // `shape.numel()` elements from parameter `first` on (consecutive parameters as one tensor, such
  // as BERT's query, key and value as one fused matrix); undefined when not all held.
  TensorView span(const std::string& first, Shape shape) const;
};

// One adapter's parameters (or their gradients) and the frozen linear it sits on.
struct AdapterWeights {
  TensorView a, b, magnitude;       // (r, in), (out, r), (out) for DoRA
  TensorView frozen, frozen_bias;   // the base weight (out, in) and bias (out) or undefined
  bool defined() const { return a.defined(); }
};

// Every adapter of a model, by layer and site kind, plus what forward and backward need.
struct AdapterSet {
  bool dora = false;
  float scale = 1.0f;
  float dropout = 0.0f;
  int64_t r = 0;
  std::vector<std::vector<AdapterWeights>> layers;  // [layer][kind]; empty without adapters
  // DoRA caches (per layer and kind): ||W_o||^2 of the frozen weight and the current norms.
  std::vector<std::vector<TensorView>> weight_sq, norm;
  TensorView norm_workspace;
  bool any() const { return !layers.empty(); }
  const AdapterWeights& at(int64_t layer, int kind) const { return layers[layer][kind]; }
};

// The parameters a BackboneModel runs on.
struct BoundParams {
  // Every base parameter, fp32 (the master weights). With frozen 16-bit weights (LoRA and bf16 /
  // f16 compute; SequenceClassifier::frozen_16bit) the GEMM weights of gemm_weight_range have no
  // fp32 copy: their views here are the compute-type ones of `shadow`.
  ParamViews values;
  ParamViews grads;   // gradients of the trainable ones (undefined views for frozen parameters)
  ParamViews shadow;  // mixed precision: the GEMM weights in the compute type; else table null
  AdapterSet adapters, adapter_grads;  // empty without adapters
};

class BackboneModel {
 public:
  virtual ~BackboneModel() = default;
  // Its activation and workspace buffers (one table: planned, then bound).
  virtual void buffers(BufferTable& table) = 0;
  virtual void bind(const BoundParams& params) = 0;
  // Logits (B, K) of the batch.
  virtual TensorView forward(const TokenInputs& in, const DropoutPlan& dropout) = 0;
  // dlogits (B, K) -> parameter gradients (+=).
  virtual void backward(TensorView dlogits, const TokenInputs& in, const DropoutPlan& dropout) = 0;
  // The last hidden state of the last forward: (B, T, C) padded, (N, C) packed; (B, 1, C) where
  // the model computed only the first tokens (BackboneShape::first_token_head).
  virtual TensorView hidden() const = 0;
  // A causal LM (ModelInfo::causal_lm): forward returns the final hidden states (N, C) and
  // backward takes their gradient (N, C) in place of dlogits.
};

class Backbone {
 public:
  virtual ~Backbone() = default;
  virtual const ModelInfo& info() const = 0;
  // A copy with other labels (the head is sized by them) or other dropout rates.
  virtual std::shared_ptr<const Backbone> with_labels(std::vector<std::string> labels) const = 0;
  virtual std::shared_ptr<const Backbone> with_dropout(const DropoutRates& rates) const = 0;
  // config.json content for saving: the original fields with the classification ones updated.
  virtual nlohmann::json config_json() const = 0;

  // Parameters under their HF names (the name map), base model first, the head last.
  virtual void add_params(ParamTable& table) const = 0;
  // The head's parameters (PEFT's modules_to_save of a SEQ_CLS task: always trained with
  // adapters), in table order, and those of modules a user may add to modules_to_save (BERT's
  // pooler) when `adapters` names them.
  virtual std::vector<std::string> head_params(const AdapterConfig& adapters) const = 0;
  // All parameters a missing checkpoint tensor may be freshly initialised for (the head, and a
  // pooler): anything else missing is an error.
  virtual bool may_initialise(const std::string& param) const = 0;
  // The output layer's parameters, whose shape follows the labels: the only ones a checkpoint of
  // another label count may be re-initialised for.
  virtual bool sized_by_labels(const std::string& param) const = 0;
  // modules_to_save as PEFT's adapter_config.json lists them.
  virtual std::vector<std::string> peft_modules_to_save(const AdapterConfig& adapters) const = 0;
  // Names under which a checkpoint may hold `param` (the HF name first; prefix-less base models,
  // legacy spellings).
  virtual std::vector<std::string> checkpoint_names(const std::string& param) const = 0;
  // HF's _init_weights for `spec` into dst (seeded; reproducible in ftune, not equal to torch's).
  virtual void init_param(const ParamSpec& spec, TensorView dst, std::mt19937_64& rng) const = 0;
  // The parameters the GEMMs read, one contiguous range [first, first + count) of the table:
  // what mixed precision keeps a 16-bit shadow of.
  virtual std::pair<int64_t, int64_t> gemm_weight_range(const ParamTable& table) const = 0;
  // Every adaptable linear module, layer by layer.
  virtual std::vector<AdapterSite> adapter_sites() const = 0;
  // named_modules() of its HF *ForSequenceClassification: what PEFT's target_modules are
  // resolved against (resolve_target_modules; its adaptable ones are adapter_sites()).
  virtual std::vector<ClassifierModule> modules() const = 0;

  // Position ids of one row of n tokens (padding, if any, at its end), as HF computes them.
  virtual void row_positions(const int32_t* ids, int64_t n, int32_t* positions) const = 0;
  virtual FlopModel flops() const = 0;
  virtual std::unique_ptr<BackboneModel> make_model(const BackboneShape& shape) const = 0;
  // The same model as a causal LM (HF's *ForCausalLM: the lm_head instead of a score head; see
  // ModelInfo::causal_lm). Families without one throw an InputError naming the architecture.
  virtual std::shared_ptr<const Backbone> as_causal_lm() const;
};

// The handle code outside models/ holds: a shared, immutable Backbone.
class ModelSpec {
 public:
  ModelSpec() = default;
  explicit ModelSpec(std::shared_ptr<const Backbone> backbone) : b_(std::move(backbone)) {}

  bool defined() const { return b_ != nullptr; }
  const Backbone& backbone() const;
  const ModelInfo& info() const { return backbone().info(); }
  int64_t num_labels() const { return info().num_labels(); }
  ModelSpec with_labels(std::vector<std::string> labels) const;
  ModelSpec with_num_labels(int64_t n) const;  // names LABEL_i
  ModelSpec with_dropout(const DropoutRates& rates) const;
  // The causal-LM form of the model (Backbone::as_causal_lm); itself when it already is one.
  ModelSpec as_causal_lm() const;
  // HF's problem_type saved with the model ("regression", "multi_label_classification",
  // "single_label_classification"; "" removes the key): what the trained head was trained for,
  // so transformers computes the same loss from it. Without a call the checkpoint's is kept.
  ModelSpec with_problem_type(std::string problem_type) const;
  // The checkpoint's problem_type, or the one set by with_problem_type ("" when none).
  std::string problem_type() const;
  // config.json as saved: the family's config with num_labels, id2label, label2id and the
  // problem_type.
  nlohmann::json to_json() const;

 private:
  std::shared_ptr<const Backbone> b_;
  std::optional<std::string> problem_type_;  // set by with_problem_type
};

// The family registry: model_type -> a Backbone from config.json content (errors name `path`).
// BERT, RoBERTa and XLM-R are built in; tests register more.
// `modules` lists the named modules a model of the family may have (layers up to 128): what
// peft.target_modules is checked against for typos before a model is loaded.
using BackboneFactory =
    std::function<std::shared_ptr<const Backbone>(const nlohmann::json& config, const std::string& path)>;
using ModuleList = std::function<std::vector<ClassifierModule>()>;
void register_backbone(const std::string& model_type, BackboneFactory factory,
                       ModuleList modules = {});
ModelSpec model_spec_from_json(const nlohmann::json& config, const std::string& path);
// The module names of every registered family (BERT and RoBERTa trees up to 128 layers first).
std::vector<ClassifierModule> known_modules();

}  // namespace ftune
