// SequenceClassifier: planning, binding, inputs, and the forward / loss / backward sequence, for
// any family (the family's BackboneModel runs the layers).
#include "models/sequence_classifier.h"

#include <fmt/format.h>

#include <set>

#include "core/memory.h"
#include "models/adapters.h"
#include "ops/bce_with_logits.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/listwise_loss.h"
#include "ops/margin_mse_loss.h"
#include "ops/mse_loss.h"

namespace ftune {
namespace {

void copy_i32(TensorView dst, const std::vector<int32_t>& src) {
  TensorView host(const_cast<int32_t*>(src.data()), DType::I32, Device::cpu(),
                  Shape{static_cast<int64_t>(src.size())});
  copy(dst.prefix(host.shape), host);
}

void copy_f32(TensorView dst, const std::vector<float>& src) {
  TensorView host(const_cast<float*>(src.data()), DType::F32, Device::cpu(),
                  Shape{static_cast<int64_t>(src.size())});
  copy(dst.prefix(host.shape), host);
}

}  // namespace

const char* loss_kind_name(LossKind kind) {
  switch (kind) {
    case LossKind::CrossEntropy:
      return "cross_entropy";
    case LossKind::Bce:
      return "bce";
    case LossKind::Mse:
      return "mse";
  }
  return "?";
}

SequenceClassifier::SequenceClassifier(ModelSpec spec, ClassifierOptions options)
    : spec_(std::move(spec)), options_(options) {
  if (options_.max_batch <= 0 || options_.max_seq <= 0)
    throw InputError(fmt::format("batch shape must be positive, got {} x {}", options_.max_batch,
                                 options_.max_seq));
  if (options_.packed && options_.max_tokens < options_.max_seq)
    throw InputError(fmt::format("a packed batch of {} tokens cannot hold a row of {}",
                                 options_.max_tokens, options_.max_seq));
  if (options_.packed && !spec_.info().packing)
    throw InputError(fmt::format("{} does not support packed batches (data.packing)",
                                 spec_.info().architecture));
  FTUNE_ASSERT(options_.checkpointing != GradientCheckpointing::Auto,
               "gradient checkpointing 'auto' must be resolved by the memory planner");
  const Backbone& b = spec_.backbone();
  b.add_params(params_);
  gemm_range_ = b.gemm_weight_range(params_);
  sites_ = b.adapter_sites();
  BackboneShape shape;
  shape.max_rows = options_.max_batch;
  shape.max_seq = options_.max_seq;
  shape.max_tokens = options_.tokens();
  shape.max_token_positions = options_.max_token_positions;
  shape.training = options_.training;
  shape.packed = options_.packed;
  shape.checkpointing = options_.checkpointing;
  shape.adapters = options_.adapters;
  shape.compute = options_.compute;
  shape.device = options_.device;
  shape.attention = options_.attention;
  shape.first_token_head = options_.first_token_head;
  model_ = b.make_model(shape);
  lm_ = spec_.info().causal_lm;
  if (lm_)
    lm_loss_ = CausalLmLoss(options_.tokens(), spec_.info().hidden_size, spec_.info().vocab_size,
                            spec_.info().lm_softcap, options_.device);
  if (lm_) lm_loss_.set_compute(options_.compute);
  if (!adapters_on()) return;
  if (options_.adapters.r <= 0 || !(options_.adapters.alpha > 0))
    throw InputError(fmt::format("adapter rank and alpha must be positive, got r {} alpha {}",
                                 options_.adapters.r, options_.adapters.alpha));
  // PEFT's resolution of target_modules over the family's module tree: errors for what cannot
  // take an adapter; what it adapts are the targeted adapter sites.
  resolve_target_modules(options_.adapters, b.modules(), "peft");
  add_adapter_params(sites_, options_.adapters, adapter_params_);
  // The head (PEFT's modules_to_save) comes last in params_, so it and the adapters that follow
  // it form one flat range.
  // A causal LM's head is frozen with adapters (PEFT's CAUSAL_LM): only the adapters train.
  const std::vector<std::string> head = b.head_params(options_.adapters);
  trainable_offset_ = head.empty() ? params_.total() : params_.at(head.front()).offset;
  const auto [first, count] = gemm_range_;
  frozen16_ = options_.compute != DType::F32 && !options_.adapters.dora() && count > 0;
  if (frozen16_) {
    FTUNE_ASSERT(trainable_offset_ >= first + count,
                 "the trained parameters start at {}, inside the frozen layers [{}, {})",
                 trainable_offset_, first, first + count);
    // Before the layers: the embedding tables (the family's nn.Embedding modules, read only by
    // the embedding lookup, which takes a 16-bit table) are stored in 16 bits too, the rest (the
    // embeddings' LayerNorm) in fp32.
    std::set<std::string> tables;
    for (const ClassifierModule& m : b.modules())
      if (m.kind == ModuleKind::Embedding) tables.insert(m.name + ".weight");
    for (const ParamSpec& p : params_.specs()) {
      const bool table = options_.embeddings_16bit && tables.count(p.name) && p.shape.rank() == 2;
      if (p.offset < first) (table ? embed_tables_ : embed_rest_).add(p.name, p.shape);
      if (p.offset >= first && p.offset < first + count && p.shape.rank() == 1)
        layer_vectors_.add(p.name, p.shape);
    }
    // A causal LM's untied head (lm_head.weight, the last base parameter; frozen with adapters,
    // as PEFT's CAUSAL_LM leaves it) is stored in 16 bits too, in its own buffer: 2 GiB less for
    // Llama-3.1-8B's 128k x 4096. (Tied, it is the embedding table above.)
    const ParamSpec* head_spec = lm_ ? params_.find(spec_.info().lm_head) : nullptr;
    if (head_spec && head_spec->offset >= first + count) {
      FTUNE_ASSERT(head_spec->offset + head_spec->shape.numel() == params_.total(),
                   "the untied LM head {} is not the last base parameter", head_spec->name);
      head16_.add(head_spec->name, head_spec->shape);
    }
  }
  if (lm_) lm_loss_.set_head_type(frozen16_ && param_is_16bit(spec_.info().lm_head)
                                      ? options_.compute
                                      : DType::F32);
  for (const ParamSpec& p : params_.specs())
    if (p.offset >= trainable_offset_) trainable_.add(p.name, p.shape);
  for (const ParamSpec& p : adapter_params_.specs()) trainable_.add(p.name, p.shape);
}

bool SequenceClassifier::param_is_16bit(const std::string& name) const {
  if (!frozen16_) return false;
  const ParamSpec* p = params_.find(name);
  const auto [first, count] = gemm_range_;
  return p && (embed_tables_.find(name) || head16_.find(name) ||
               (p->offset >= first && p->offset < first + count && p->shape.rank() == 2));
}

TensorView SequenceClassifier::param(const std::string& name) const {
  const ParamSpec* spec = params_.find(name);
  if (spec && !frozen16_) return ParamTable::slice(values_, *spec);
  if (spec) return tail_views_.get(name);
  return ParamTable::slice(trainable_values(), trainable_params().at(name));
}

std::vector<TensorView> SequenceClassifier::weight_storage() const {
  std::vector<TensorView> out{all_values_};
  if (frozen16_) {
    out.push_back(shadow_);
    out.push_back(vector_values_);
    if (embed_values_.defined()) out.push_back(embed_values_);
    if (embed16_values_.defined()) out.push_back(embed16_values_);
    if (head16_values_.defined()) out.push_back(head16_values_);
  }
  return out;
}

SequenceClassifier::OptimizerShadow SequenceClassifier::optimizer_shadow() const {
  if (!shadow_.defined() || adapters_on()) return {};
  // Without adapters the trainable values are every parameter: the offset is the range's own.
  return {shadow_, gemm_range_.first};
}

void SequenceClassifier::init_adapters(uint64_t seed) {
  FTUNE_ASSERT(all_values_.defined(), "init_adapters before bind");
  ftune::init_adapters(adapters_, seed);
}

void SequenceClassifier::buffers(BufferTable& t) const {
  const int64_t N = options_.tokens(), B = options_.max_batch, K = spec_.num_labels();
  auto* self = const_cast<SequenceClassifier*>(this);
  const int64_t P = params_.total(), A = adapter_params_.total();
  const auto [first, count] = gemm_range_;
  if (frozen16_) {
    // "param/values": the head and the adapters after the layers; the layers' GEMM weights are
    // "param/layers16" alone.
    t.add("param/values", DType::F32, {P - first - count - head16_.total() + A},
          &self->all_values_);
    if (head16_.total() > 0)
      t.add("param/head16", options_.compute, {head16_.total()}, &self->head16_values_);
    if (embed_rest_.total() > 0)
      t.add("param/embeddings", DType::F32, {embed_rest_.total()}, &self->embed_values_);
    if (embed_tables_.total() > 0)
      t.add("param/embeddings16", options_.compute, {embed_tables_.total()},
            &self->embed16_values_);
    t.add("param/layer_vectors", DType::F32, {layer_vectors_.total()}, &self->vector_values_);
    t.add("param/layers16", options_.compute, {count}, &self->shadow_);
  } else {
    t.add("param/values", DType::F32, {P + A}, &self->all_values_);
    if (options_.compute != DType::F32)
      t.add("shadow/layers", options_.compute, {count}, &self->shadow_);
  }
  if (options_.training) t.add("grad/values", DType::F32, {trainable_params().total()}, &self->grads_);
  if (options_.own_inputs) {
    t.add("input/ids", DType::I32, {N}, &self->own_inputs_.ids);
    t.add("input/type_ids", DType::I32, {N}, &self->own_inputs_.type_ids);
    t.add("input/pos_ids", DType::I32, {N}, &self->own_inputs_.pos_ids);
    if (options_.packed)
      t.add("input/cu_seqlens", DType::I32, {B + 1}, &self->own_inputs_.cu_seqlens);
    else
      t.add("input/mask", DType::I32, {N}, &self->own_inputs_.mask);
    // A causal LM's labels are per token.
    t.add("input/labels", DType::I32, {lm_ ? N : B}, &self->own_labels_);
    // A score task's float targets (B, K): a few KiB, planned for every task.
    if (!lm_) t.add("input/targets", DType::F32, {B, K}, &self->own_targets_);
  }
  model_->buffers(t);
  if (lm_) {
    self->lm_loss_.buffers(t, options_.training);
    t.add("act/loss/value", DType::F32, {1}, &self->loss_);
    return;
  }
  t.add("input/class_weights", DType::F32, {K}, &self->class_weights_);
  t.add("act/loss/probs", DType::F32, {B, K}, &self->probs_);
  t.add("act/loss/value", DType::F32, {1}, &self->loss_);
  if (options_.training) t.add("gradact/logits", DType::F32, {B, K}, &self->dlogits_);
}

void SequenceClassifier::add_to_plan(ArenaPlan& plan) const {
  BufferTable t;
  buffers(t);
  t.plan(plan);
  plan_adapter_caches(sites_, options_.adapters, plan);
}

void SequenceClassifier::bind(const Arena& arena) {
  BufferTable t;
  buffers(t);
  t.bind(arena);
  BoundParams p;
  if (frozen16_) {
    const int64_t tail = gemm_range_.first + gemm_range_.second, head16 = head16_.total();
    values_ = TensorView();
    layers16_views_ = ParamViews{&params_, shadow_, gemm_range_.first};
    vector_views_ = ParamViews{&layer_vectors_, vector_values_, 0, &layers16_views_};
    embed16_views_ = ParamViews{&embed_tables_, embed16_values_, 0, &vector_views_};
    embed_views_ = ParamViews{&embed_rest_, embed_values_, 0, &embed16_views_};
    head16_views_ = ParamViews{&head16_, head16_values_, 0, &embed_views_};
    // The fp32 tail ends before an untied 16-bit head (the last base parameter).
    tail_views_ = ParamViews{&params_, all_values_.flat_range(0, params_.total() - tail - head16),
                             tail, &head16_views_};
    p.values = tail_views_;
  } else {
    values_ = all_values_.flat_range(0, params_.total());
    p.values = ParamViews{&params_, values_, 0};
  }
  if (adapters_on()) {
    const int64_t start =
        frozen16_ ? gemm_range_.first + gemm_range_.second + head16_.total() : 0;
    trainable_values_ = all_values_.flat_range(trainable_offset_ - start, trainable_.total());
    adapters_ = bind_adapters(sites_, options_.adapters, trainable_, trainable_values_, &p.values);
    bind_adapter_caches(sites_, arena, adapters_);
    p.adapters = adapters_;
  }
  frozen_cache_valid_ = false;
  shadow_valid_ = false;
  if (shadow_.defined()) p.shadow = ParamViews{&params_, shadow_, gemm_range_.first};
  if (options_.training) {
    // Frozen base (adapters): only the trained head and the adapters have gradient views.
    p.grads = ParamViews{&trainable_params(), grads_, 0};
    if (adapters_on())
      p.adapter_grads = bind_adapters(sites_, options_.adapters, trainable_, grads_);
    zero_grad();
  }
  model_->bind(p);
  inputs_ = own_inputs_;
  labels_ = own_labels_;
  targets_ = own_targets_;
  class_weights_copied_ = false;
}

void SequenceClassifier::set_batch(const Batch& b) {
  FTUNE_ASSERT(all_values_.defined(), "set_batch before bind");
  if (b.size > options_.max_batch || b.seq_len > options_.max_seq)
    throw InputError(fmt::format("batch of {} x {} tokens exceeds the planned {} x {}", b.size,
                                 b.seq_len, options_.max_batch, options_.max_seq));
  validate_batch(spec_, b);
  // Padded: all of the batch's T positions (a multiple of T, capped at T), as given.
  set_batch(layout_rows(b, position_ids(spec_, b), 0, b.size,
                        options_.packed ? BatchLayout::Packed : BatchLayout::Padded, b.seq_len));
}

void SequenceClassifier::set_batch(const TokenBatch& b) {
  FTUNE_ASSERT(all_values_.defined(), "set_batch before bind");
  FTUNE_ASSERT(options_.own_inputs, "set_batch on a model planned without inputs of its own "
               "(ClassifierOptions::own_inputs: its batches come through use_inputs)");
  if (b.packed() != options_.packed)
    throw InputError(fmt::format("a {} batch for a model planned for {} batches",
                                 batch_layout_name(b.layout), options_.packed ? "packed" : "padded"));
  if (b.rows > options_.max_batch || b.tokens() > options_.tokens() || b.seq > options_.max_seq)
    throw InputError(fmt::format("batch of {} rows, {} tokens (longest {}) exceeds the planned {} "
                                 "x {} ({} tokens)",
                                 b.rows, b.tokens(), b.seq, options_.max_batch, options_.max_seq,
                                 options_.tokens()));
  inputs_ = own_inputs_;
  labels_ = own_labels_;
  targets_ = own_targets_;
  inputs_.B = b.rows;
  copy_i32(inputs_.ids, b.input_ids);
  copy_i32(inputs_.type_ids, b.token_type_ids);
  copy_i32(inputs_.pos_ids, b.position_ids);
  if (b.packed()) {
    inputs_.T = 0;
    inputs_.N = b.tokens();
    inputs_.max_len = b.seq;
    host_cu_ = b.cu_seqlens;
    inputs_.host_cu_seqlens = host_cu_.data();
    copy_i32(inputs_.cu_seqlens, b.cu_seqlens);
  } else {
    inputs_.T = b.seq;
    copy_i32(inputs_.mask, b.attention_mask);
  }
  if (lm_) {
    has_labels_ = !b.token_labels.empty();
    if (has_labels_ && b.token_labels.size() != b.input_ids.size())
      throw InputError(fmt::format("batch of {} tokens has {} token labels", b.input_ids.size(),
                                   b.token_labels.size()));
    if (has_labels_) copy_i32(labels_, b.token_labels);
    has_targets_ = false;
    return;
  }
  has_labels_ = !b.labels.empty();
  if (has_labels_) copy_i32(labels_, b.labels);
  has_targets_ = !b.targets.empty();
  if (has_targets_) {
    if (static_cast<int64_t>(b.targets.size()) != b.rows * spec_.num_labels())
      throw InputError(
          fmt::format("batch of {} rows has {} float targets; the model has {} scores "
                      "per row",
                      b.rows, b.targets.size(), spec_.num_labels()));
    copy_f32(targets_, b.targets);
  }
}

void SequenceClassifier::use_inputs(const TokenInputs& in, TensorView labels, TensorView targets) {
  FTUNE_ASSERT(all_values_.defined(), "use_inputs before bind");
  if (in.packed() != options_.packed || in.B > options_.max_batch ||
      (in.packed() ? in.N > options_.max_tokens || in.max_len > options_.max_seq
                   : in.T > options_.max_seq))
    throw InputError(fmt::format("batch of {} rows, {} tokens exceeds the planned {} x {}", in.B,
                                 in.tokens(), options_.max_batch, options_.max_seq));
  const Shape n{in.tokens()};
  for (const TensorView* v : {&in.ids, &in.type_ids, &in.pos_ids, in.packed() ? &in.cu_seqlens : &in.mask})
    FTUNE_ASSERT(v->dtype == DType::I32 && v->device == all_values_.device &&
                     (v == &in.cu_seqlens ? v->shape == Shape{in.B + 1} : v->shape == n),
                 "use_inputs: expected i32 inputs of {} tokens on the model's device, got {}",
                 n[0], v->describe());
  FTUNE_ASSERT(!in.packed() || in.host_cu_seqlens != nullptr,
               "use_inputs: a packed batch needs its cu_seqlens on the host");
  FTUNE_ASSERT(labels.dtype == DType::I32 && labels.shape == Shape{lm_ ? in.tokens() : in.B} &&
                   labels.device == all_values_.device,
               "use_inputs: expected ({}) i32 labels, got {}", in.B, labels.describe());
  FTUNE_ASSERT(!targets.defined() || (targets.dtype == DType::F32 &&
                                      targets.shape == Shape({in.B, spec_.num_labels()}) &&
                                      targets.device == all_values_.device),
               "use_inputs: expected ({}, {}) f32 targets, got {}", in.B, spec_.num_labels(),
               targets.describe());
  inputs_ = in;
  labels_ = labels;
  has_labels_ = true;
  targets_ = targets.defined() ? targets : own_targets_;
  has_targets_ = targets.defined();
}

TokenInputs SequenceClassifier::current_inputs() const {
  const Shape n{inputs_.tokens()};
  TokenInputs in = inputs_;
  in.ids = inputs_.ids.prefix(n);
  in.type_ids = inputs_.type_ids.prefix(n);
  in.pos_ids = inputs_.pos_ids.prefix(n);
  if (in.packed())
    in.cu_seqlens = inputs_.cu_seqlens.prefix({inputs_.B + 1});
  else
    in.mask = inputs_.mask.prefix(n);
  return in;
}

void SequenceClassifier::refresh_weight_caches() {
  if (!frozen_cache_valid_) {
    refresh_adapter_caches(adapters_);
    frozen_cache_valid_ = true;
  }
  if (shadow_.defined() && !shadow_valid_) {
    if (frozen16_) {
      // The 16-bit GEMM weights are the stored ones; the layers' vectors (biases the frozen GEMMs
      // add in the compute type, norms) live in fp32 and are cast into their 16-bit slots.
      for (const ParamSpec& v : layer_vectors_.specs()) {
        const int64_t at = params_.at(v.name).offset - gemm_range_.first;
        cast(shadow_.flat_range(at, v.shape.numel()), vector_values_.flat_range(v.offset, v.shape.numel()));
      }
    } else {
      cast(shadow_, values_.flat_range(gemm_range_.first, gemm_range_.second));
    }
    shadow_valid_ = true;
  }
}

void SequenceClassifier::prepare_forward(const LossOptions& loss) {
  refresh_weight_caches();
  copy_class_weights(loss);
}

TensorView SequenceClassifier::forward(const DropoutPlan& dropout) {
  FTUNE_ASSERT(inputs_.B > 0, "forward without a batch");
  if (dropout.training && !options_.training)
    throw InternalError("training forward on a classifier planned for inference");
  refresh_weight_caches();
  logits_ = model_->forward(current_inputs(), dropout);
  return logits_;
}

// Copied once (a synchronous copy on a GPU), not per micro-batch; loss_options_ then holds them.
void SequenceClassifier::copy_class_weights(const LossOptions& options) {
  const int64_t K = spec_.num_labels();
  if (!options.class_weights.empty() && static_cast<int64_t>(options.class_weights.size()) != K)
    throw InputError(
        fmt::format("{} class weights given for {} labels", options.class_weights.size(), K));
  if (!options.class_weights.empty() &&
      (!class_weights_copied_ || options.class_weights != loss_options_.class_weights)) {
    TensorView host(const_cast<float*>(options.class_weights.data()), DType::F32, Device::cpu(),
                    Shape{K});
    copy(class_weights_, host);
    class_weights_copied_ = true;
  }
  loss_options_ = options;
}

std::vector<double> SequenceClassifier::lm_row_nll() {
  if (!lm_ || !has_labels_ || inputs_.packed())
    throw InputError("per-row log-likelihoods need a causal LM's padded batch with token labels");
  const int64_t B = inputs_.B, T = inputs_.T, C = spec_.info().hidden_size;
  const TensorView h = logits_.reshape({B * T, C});
  std::vector<double> out;
  HostTensor value(DType::F32, Shape{1});
  for (int64_t r = 0; r < B; ++r) {
    // normalizer 1: the sum over the row's counted tokens, not their mean.
    lm_loss_.forward(loss_, h.slice0(r * T, (r + 1) * T), param(spec_.info().lm_head),
                     labels_.slice0(r * T, (r + 1) * T), 1.0);
    copy(value.view(), loss_);
    out.push_back(double(value.data<float>()[0]));
  }
  return out;
}

TensorView SequenceClassifier::loss(const LossOptions& options) {
  if (!has_labels_) throw InputError("loss requested for a batch without labels");
  if (lm_) {
    loss_options_ = options;
    lm_loss_.forward(loss_, logits_, param(spec_.info().lm_head), labels_, options.lm_normalizer);
    return loss_;
  }
  const int64_t B = inputs_.B, K = spec_.num_labels();
  if (options.listwise_group_size > 0 && options.kind != LossKind::CrossEntropy) {
    // A group loss on a one-score head: the targets are relevance (listwise) or teacher scores.
    if (!has_targets_ || K != 1)
      throw InputError(fmt::format(
          "the {} loss needs one score per row and float targets; the model has {} and the batch "
          "{} targets",
          options.margin_mse ? "margin_mse" : "listwise", K, has_targets_ ? "has" : "has no"));
    loss_options_ = options;
    const TensorView t = targets_.prefix({B, 1}).reshape({B});
    if (options.margin_mse)
      margin_mse_loss_forward(loss_, probs_.prefix({B}), logits_, t, labels_.prefix({B}),
                              options.listwise_group_size);
    else
      listwise_loss_forward(loss_, probs_.prefix({B}), logits_, t, options.listwise_group_size);
    return loss_;
  }
  if (options.kind != LossKind::CrossEntropy) {
    if (!has_targets_)
      throw InputError(fmt::format("the {} loss needs float targets; the batch has none",
                                   loss_kind_name(options.kind)));
    loss_options_ = options;
    const TensorView z = logits_, t = targets_.prefix({B, K}), aux = probs_.prefix({B, K});
    if (options.kind == LossKind::Bce)
      bce_with_logits_forward(loss_, aux, z, t, labels_.prefix({B}));
    else
      mse_loss_forward(loss_, aux, z, t, labels_.prefix({B}));
    return loss_;
  }
  copy_class_weights(options);
  if (options.listwise_group_size > 0) {
    listwise_loss_forward(loss_, probs_.prefix({B}), logits_, labels_.prefix({B}),
                          options.listwise_group_size);
    return loss_;
  }
  CrossEntropyOptions ce{options.label_smoothing,
                         options.class_weights.empty() ? TensorView() : class_weights_};
  cross_entropy_forward(loss_, probs_.prefix({B, K}), logits_, labels_.prefix({B}), ce);
  return loss_;
}

void SequenceClassifier::backward(const DropoutPlan& dropout, float loss_scale,
                                  const float* loss_scale_at) {
  FTUNE_ASSERT(options_.training, "backward on a classifier planned for inference");
  if (lm_) {
    // The head's gradient when it trains (full fine-tuning; tied: the embedding's, which the
    // backbone's embedding backward then adds to).
    const std::string& head = spec_.info().lm_head;
    const TensorView dW = trainable_params().find(head) ? grad(head) : TensorView();
    const TensorView dhidden =
        lm_loss_.backward(logits_, param(head), dW, labels_, loss_options_.lm_normalizer,
                          loss_scale, loss_scale_at);
    model_->backward(dhidden, current_inputs(), dropout);
    return;
  }
  const int64_t B = inputs_.B, K = spec_.num_labels();
  CrossEntropyOptions ce{loss_options_.label_smoothing,
                         loss_options_.class_weights.empty() ? TensorView() : class_weights_};
  TensorView dlogits = dlogits_.prefix({B, K});
  if (loss_options_.listwise_group_size > 0 && loss_options_.margin_mse)
    margin_mse_loss_backward(dlogits, probs_.prefix({B}), labels_.prefix({B}),
                             loss_options_.listwise_group_size, loss_scale, loss_scale_at);
  else if (loss_options_.listwise_group_size > 0 && loss_options_.kind != LossKind::CrossEntropy)
    listwise_loss_backward(dlogits, probs_.prefix({B}), targets_.prefix({B, 1}).reshape({B}),
                           loss_options_.listwise_group_size, loss_scale, loss_scale_at);
  else if (loss_options_.listwise_group_size > 0)
    listwise_loss_backward(dlogits, probs_.prefix({B}), labels_.prefix({B}),
                           loss_options_.listwise_group_size, loss_scale, loss_scale_at);
  else if (loss_options_.kind == LossKind::Bce)
    bce_with_logits_backward(dlogits, probs_.prefix({B, K}), targets_.prefix({B, K}),
                             labels_.prefix({B}), loss_scale, loss_scale_at);
  else if (loss_options_.kind == LossKind::Mse)
    mse_loss_backward(dlogits, probs_.prefix({B, K}), labels_.prefix({B}), loss_scale,
                      loss_scale_at);
  else
    cross_entropy_backward(dlogits, probs_.prefix({B, K}), labels_.prefix({B}), ce, loss_scale,
                           loss_scale_at);
  model_->backward(dlogits, current_inputs(), dropout);
}

void SequenceClassifier::zero_grad() {
  if (grads_.defined()) fill_zero(grads_);
}

}  // namespace ftune
