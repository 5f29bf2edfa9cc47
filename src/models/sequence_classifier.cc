// SequenceClassifier: planning, binding, inputs, and the forward / loss / backward sequence.
#include "models/sequence_classifier.h"

#include <fmt/format.h>

#include "core/memory.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"

namespace ftune {
namespace {

void copy_i32(TensorView dst, const std::vector<int32_t>& src) {
  TensorView host(const_cast<int32_t*>(src.data()), DType::I32, Device::cpu(),
                  Shape{static_cast<int64_t>(src.size())});
  copy(dst.prefix(host.shape), host);
}

}  // namespace

SequenceClassifier::SequenceClassifier(EncoderConfig config, ClassifierOptions options)
    : config_(std::move(config)), options_(options) {
  if (options_.max_batch <= 0 || options_.max_seq <= 0)
    throw InputError(fmt::format("batch shape must be positive, got {} x {}", options_.max_batch,
                                 options_.max_seq));
  FTUNE_ASSERT(options_.checkpointing != GradientCheckpointing::Auto,
               "gradient checkpointing 'auto' must be resolved by the memory planner");
  add_encoder_params(config_, params_);
  add_head_params(config_, params_);
  if (!adapters_on()) return;
  if (options_.adapters.r <= 0 || !(options_.adapters.alpha > 0))
    throw InputError(fmt::format("adapter rank and alpha must be positive, got r {} alpha {}",
                                 options_.adapters.r, options_.adapters.alpha));
  add_adapter_params(config_, options_.adapters, adapter_params_);
  if (adapter_params_.specs().empty())
    throw InputError(fmt::format("peft.target_modules matches no linear module of this {} model",
                                 config_.weight_prefix()));
  // PEFT's SEQ_CLS modules_to_save: the classifier (RoBERTa: its dense + out_proj), plus BERT's
  // pooler when asked. Head parameters come last in params_, so they and the adapters that follow
  // them form one flat range.
  const auto head = head_param_names(config_);
  const bool pooler = config_.family == ModelFamily::Bert && options_.adapters.trains_pooler();
  const std::string first = (config_.roberta_like() || pooler) ? head[0] : head[2];
  trainable_offset_ = params_.at(first).offset;
  for (const ParamSpec& spec : params_.specs())
    if (spec.offset >= trainable_offset_) trainable_.add(spec.name, spec.shape);
  for (const ParamSpec& spec : adapter_params_.specs()) trainable_.add(spec.name, spec.shape);
}

TensorView SequenceClassifier::param(const std::string& name) const {
  if (const ParamSpec* spec = params_.find(name)) return ParamTable::slice(values_, *spec);
  return ParamTable::slice(trainable_values(), trainable_params().at(name));
}

SequenceClassifier::OptimizerShadow SequenceClassifier::optimizer_shadow() const {
  if (!shadow_.defined() || adapters_on()) return {};
  // Without adapters the trainable values are every parameter: the offset is the layers' own.
  return {shadow_, encoder_layer_range(config_, params_).first};
}

void SequenceClassifier::init_adapters(uint64_t seed) {
  FTUNE_ASSERT(values_.defined(), "init_adapters before bind");
  ftune::init_adapters(enc_w_.adapters, enc_w_, seed);
}

void SequenceClassifier::add_to_plan(ArenaPlan& plan) const {
  const int64_t N = options_.max_batch * options_.max_seq, K = config_.num_labels();
  plan.add_flat("param/values", DType::F32, params_.total() + adapter_params_.total());
  if (options_.compute != DType::F32)
    plan.add_flat("shadow/layers", options_.compute, encoder_layer_range(config_, params_).second);
  if (options_.training) plan.add_flat("grad/values", DType::F32, trainable_params().total());
  for (const char* name : {"input/ids", "input/type_ids", "input/pos_ids", "input/mask"})
    plan.add(name, DType::I32, {N});
  plan.add("input/labels", DType::I32, {options_.max_batch});
  plan.add("input/class_weights", DType::F32, {K});
  plan_encoder_activations(config_, options_.max_batch, options_.max_seq, options_.training, plan,
                           EncoderTraining{options_.checkpointing, options_.adapters,
                                           options_.compute, options_.device, options_.attention});
  plan_adapter_caches(config_, options_.adapters, plan);
  plan_head_activations(config_, options_.max_batch, options_.training, plan, options_.adapters);
  plan.add("act/loss/probs", DType::F32, {options_.max_batch, K});
  plan.add("act/loss/value", DType::F32, {1});
  if (options_.training) plan.add("gradact/logits", DType::F32, {options_.max_batch, K});
}

void SequenceClassifier::bind(const Arena& arena) {
  const TensorView all = arena.view("param/values");
  values_ = all.flat_range(0, params_.total());
  enc_w_ = bind_encoder_weights(config_, params_, values_);
  head_w_ = bind_head_weights(config_, params_, values_);
  if (adapters_on()) {
    trainable_values_ = all.flat_range(trainable_offset_, trainable_.total());
    enc_w_.adapters = bind_adapters(config_, options_.adapters, trainable_, trainable_values_);
    enc_w_.adapters.pooler_weight = head_w_.dense_w;  // frozen when it carries an adapter
    bind_adapter_caches(config_, arena, enc_w_.adapters);
  }
  frozen_cache_valid_ = false;
  shadow_valid_ = false;
  if (options_.compute != DType::F32) {
    shadow_ = arena.view("shadow/layers");
    enc_w_.shadow = bind_layer_weights(config_, params_, shadow_);
  }
  if (options_.training) {
    grads_ = arena.view("grad/values");
    if (adapters_on()) {
      // Frozen base: undefined gradient views, except the trained head and the adapters.
      enc_g_ = EncoderWeights{};
      enc_g_.layers.resize(config_.num_layers);
      enc_g_.adapters = bind_adapters(config_, options_.adapters, trainable_, grads_);
      const auto names = head_param_names(config_);
      TensorView* views[4] = {&head_g_.dense_w, &head_g_.dense_b, &head_g_.out_w, &head_g_.out_b};
      head_g_ = HeadWeights{};
      for (int i = 0; i < 4; ++i)
        if (const ParamSpec* spec = trainable_.find(names[i]))
          *views[i] = ParamTable::slice(grads_, *spec);
    } else {
      enc_g_ = bind_encoder_weights(config_, params_, grads_);
      head_g_ = bind_head_weights(config_, params_, grads_);
    }
    dlogits_ = arena.view("gradact/logits");
    zero_grad();
  }
  inputs_.ids = arena.view("input/ids");
  inputs_.type_ids = arena.view("input/type_ids");
  inputs_.pos_ids = arena.view("input/pos_ids");
  inputs_.mask = arena.view("input/mask");
  labels_ = arena.view("input/labels");
  own_inputs_ = inputs_;
  own_labels_ = labels_;
  class_weights_ = arena.view("input/class_weights");
  class_weights_copied_ = false;
  enc_acts_ = bind_encoder_activations(
      config_, arena, options_.training,
      EncoderTraining{options_.checkpointing, options_.adapters, options_.compute, options_.device,
                      options_.attention});
  head_acts_ = bind_head_activations(arena, options_.training);
  probs_ = arena.view("act/loss/probs");
  loss_ = arena.view("act/loss/value");
}

void SequenceClassifier::set_batch(const Batch& b) {
  FTUNE_ASSERT(values_.defined(), "set_batch before bind");
  if (b.size > options_.max_batch || b.seq_len > options_.max_seq)
    throw InputError(fmt::format("batch of {} x {} tokens exceeds the planned {} x {}", b.size,
                                 b.seq_len, options_.max_batch, options_.max_seq));
  validate_batch(config_, b);
  const int64_t n = b.size * b.seq_len;
  inputs_ = own_inputs_;
  labels_ = own_labels_;
  inputs_.B = b.size;
  inputs_.T = b.seq_len;
  copy_i32(inputs_.ids, b.input_ids);
  copy_i32(inputs_.type_ids,
           b.token_type_ids.empty() ? std::vector<int32_t>(n, 0) : b.token_type_ids);
  copy_i32(inputs_.pos_ids, position_ids(config_, b));
  copy_i32(inputs_.mask, b.attention_mask);
  has_labels_ = !b.labels.empty();
  if (has_labels_) copy_i32(labels_, b.labels);
}

void SequenceClassifier::use_inputs(const EncoderInputs& in, TensorView labels) {
  FTUNE_ASSERT(values_.defined(), "use_inputs before bind");
  if (in.B > options_.max_batch || in.T > options_.max_seq)
    throw InputError(fmt::format("batch of {} x {} tokens exceeds the planned {} x {}", in.B, in.T,
                                 options_.max_batch, options_.max_seq));
  const Shape n{in.B * in.T};
  for (const TensorView* v : {&in.ids, &in.type_ids, &in.pos_ids, &in.mask})
    FTUNE_ASSERT(v->dtype == DType::I32 && v->shape == n && v->device == values_.device,
                 "use_inputs: expected ({}) i32 inputs on the model's device, got {}", n[0],
                 v->describe());
  FTUNE_ASSERT(labels.dtype == DType::I32 && labels.shape == Shape{in.B} &&
                   labels.device == values_.device,
               "use_inputs: expected ({}) i32 labels, got {}", in.B, labels.describe());
  inputs_ = in;
  labels_ = labels;
  has_labels_ = true;
}

EncoderInputs SequenceClassifier::current_inputs() const {
  const Shape n{inputs_.B * inputs_.T};
  return EncoderInputs{inputs_.B,
                       inputs_.T,
                       inputs_.ids.prefix(n),
                       inputs_.type_ids.prefix(n),
                       inputs_.pos_ids.prefix(n),
                       inputs_.mask.prefix(n)};
}

void SequenceClassifier::refresh_weight_caches() {
  if (!frozen_cache_valid_) {
    refresh_adapter_caches(enc_w_.adapters, enc_w_);
    frozen_cache_valid_ = true;
  }
  if (shadow_.defined() && !shadow_valid_) {
    const auto [begin, count] = encoder_layer_range(config_, params_);
    cast(shadow_, values_.flat_range(begin, count));
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
  hidden_ = encoder_forward(config_, enc_w_, enc_acts_, current_inputs(), dropout);
  logits_ = head_forward(config_, head_w_, head_acts_, hidden_, dropout, &enc_w_.adapters);
  return logits_;
}

// Copied once (a synchronous copy on a GPU), not per micro-batch; loss_options_ then holds them.
void SequenceClassifier::copy_class_weights(const LossOptions& options) {
  const int64_t K = config_.num_labels();
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

TensorView SequenceClassifier::loss(const LossOptions& options) {
  if (!has_labels_) throw InputError("loss requested for a batch without labels");
  const int64_t B = inputs_.B, K = config_.num_labels();
  copy_class_weights(options);
  CrossEntropyOptions ce{options.label_smoothing,
                         options.class_weights.empty() ? TensorView() : class_weights_};
  cross_entropy_forward(loss_, probs_.prefix({B, K}), logits_, labels_.prefix({B}), ce);
  return loss_;
}

void SequenceClassifier::backward(const DropoutPlan& dropout, float loss_scale,
                                  const float* loss_scale_at) {
  FTUNE_ASSERT(options_.training, "backward on a classifier planned for inference");
  const int64_t B = inputs_.B, T = inputs_.T, K = config_.num_labels(), C = config_.hidden_size;
  CrossEntropyOptions ce{loss_options_.label_smoothing,
                         loss_options_.class_weights.empty() ? TensorView() : class_weights_};
  TensorView dlogits = dlogits_.prefix({B, K});
  cross_entropy_backward(dlogits, probs_.prefix({B, K}), labels_.prefix({B}), ce, loss_scale,
                         loss_scale_at);
  head_backward(config_, head_w_, head_g_, head_acts_, dlogits,
                enc_acts_.grad_out.prefix({B, T, C}), dropout, &enc_w_.adapters, &enc_g_.adapters);
  encoder_backward(config_, enc_w_, enc_g_, enc_acts_, current_inputs(), dropout);
}

void SequenceClassifier::zero_grad() {
  if (grads_.defined()) fill_zero(grads_);
}

}  // namespace ftune
