// The ModernBERT family's Backbone and BackboneModel (see modernbert_family.h).
#include "models/modernbert_family.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/memory.h"
#include "models/modernbert.h"

namespace ftune {
namespace {

ModelInfo info_of(const ModernBertConfig& c) {
  ModelInfo i;
  i.model_type = "modernbert";
  i.architecture = "ModernBertForSequenceClassification";
  i.num_layers = c.num_layers;
  i.hidden_size = c.hidden_size;
  i.num_heads = i.num_kv_heads = c.num_heads;
  i.head_dim = c.head_dim;
  i.intermediate_size = c.intermediate_size;
  i.vocab_size = c.vocab_size;
  i.type_vocab_size = 0;  // no token types
  i.max_position_embeddings = i.max_tokens = c.max_position_embeddings;
  i.pad_token_id = c.pad_token_id >= 0 ? c.pad_token_id : 0;
  i.hidden_dropout = c.mlp_dropout;
  i.attention_dropout = c.attention_dropout;
  i.classifier_dropout = c.classifier_dropout;
  i.id2label = c.id2label;
  i.packing = true;
  return i;
}

void write_inv_freq(TensorView dst, const RopeConfig& rope, int64_t head_dim) {
  const std::vector<float> inv = rope.inv_freq(head_dim);
  HostTensor host(DType::F32, Shape{static_cast<int64_t>(inv.size())});
  std::copy(inv.begin(), inv.end(), host.data<float>());
  copy(dst, host.view());
}

class ModernBertModel final : public BackboneModel {
 public:
  ModernBertModel(const ModernBertConfig& c, const BackboneShape& shape) : c_(c), shape_(shape) {}

  void buffers(BufferTable& t) override { modernbert_buffers(c_, shape_, a_, t); }

  void bind(const BoundParams& p) override {
    w_ = bind_modernbert_weights(c_, p.values);
    w_.adapters = p.adapters;
    if (p.shadow.table) w_.shadow = bind_modernbert_weights(c_, p.shadow).layers;
    if (shape_.training) {
      g_ = bind_modernbert_weights(c_, p.grads);
      g_.adapters = p.adapter_grads;
    }
    write_inv_freq(a_.global_inv_freq, c_.global_rope, c_.head_dim);
    write_inv_freq(a_.local_inv_freq, c_.local_rope, c_.head_dim);
  }

  TensorView forward(const TokenInputs& in, const DropoutPlan& d) override {
    logits_ = modernbert_forward(c_, w_, a_, in, d);
    const int64_t N = in.tokens(), C = c_.hidden_size;
    hidden_ = in.packed() ? a_.hidden.prefix({N, C}) : a_.hidden.prefix({in.B, in.T, C});
    return logits_;
  }

  void backward(TensorView dlogits, const TokenInputs& in, const DropoutPlan& d) override {
    modernbert_backward(c_, w_, g_, a_, dlogits, in, d);
  }

  TensorView hidden() const override { return hidden_; }

 private:
  ModernBertConfig c_;
  BackboneShape shape_;
  ModernBertWeights w_, g_;
  ModernBertActs a_;
  TensorView logits_, hidden_;
};

class ModernBertBackbone final : public Backbone {
 public:
  explicit ModernBertBackbone(ModernBertConfig c) : c_(std::move(c)), info_(info_of(c_)) {}

  const ModelInfo& info() const override { return info_; }

  std::shared_ptr<const Backbone> with_labels(std::vector<std::string> labels) const override {
    if (labels.empty()) throw InputError("a classifier needs at least one label");
    ModernBertConfig c = c_;
    c.id2label = std::move(labels);
    return std::make_shared<ModernBertBackbone>(std::move(c));
  }

  // training.hidden_dropout sets HF's embedding_dropout and mlp_dropout; attention_dropout covers
  // the probabilities and the attention output (HF's out_drop), classifier_dropout the head's.
  std::shared_ptr<const Backbone> with_dropout(const DropoutRates& r) const override {
    ModernBertConfig c = c_;
    if (r.hidden >= 0) c.embedding_dropout = c.mlp_dropout = r.hidden;
    if (r.attention >= 0) c.attention_dropout = r.attention;
    if (r.classifier >= 0) c.classifier_dropout = r.classifier;
    return std::make_shared<ModernBertBackbone>(std::move(c));
  }

  nlohmann::json config_json() const override { return c_.to_json(); }

  void add_params(ParamTable& t) const override { add_modernbert_params(c_, t); }

  // PEFT's SEQ_CLS modules_to_save: the classifier (head.dense and head.norm stay frozen, as in
  // PEFT; head.dense may take an adapter).
  std::vector<std::string> head_params(const AdapterConfig&) const override {
    return {"classifier.weight", "classifier.bias"};
  }
  bool may_initialise(const std::string& p) const override {
    return p.rfind("classifier.", 0) == 0 || p.rfind("head.", 0) == 0;
  }
  bool sized_by_labels(const std::string& p) const override { return p.rfind("classifier.", 0) == 0; }
  std::vector<std::string> peft_modules_to_save(const AdapterConfig&) const override {
    return {"classifier", "score"};  // PEFT's SEQ_CLS default list
  }

  // The HF name, and the name without "model." (a base ModernBertModel saved on its own).
  std::vector<std::string> checkpoint_names(const std::string& name) const override {
    if (name.rfind("model.", 0) == 0) return {name, name.substr(6)};
    return {name};
  }

  void init_param(const ParamSpec& spec, TensorView dst, std::mt19937_64& rng) const override {
    init_modernbert_param(c_, spec, dst, rng);
  }

  std::pair<int64_t, int64_t> gemm_weight_range(const ParamTable& t) const override {
    return modernbert_layer_range(c_, t);
  }

  std::vector<AdapterSite> adapter_sites() const override { return modernbert_adapter_sites(c_); }
  std::vector<ClassifierModule> modules() const override { return modernbert_modules(c_.num_layers); }

  // HF's ModernBERT counts positions 0..T-1 over the whole row (padding at its end).
  void row_positions(const int32_t*, int64_t n, int32_t* pos) const override {
    for (int64_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>(t);
  }

  // Per layer: global layers see the whole row, local ones 2 (local_attention / 2) + 1 keys.
  FlopModel flops() const override {
    FlopModel f{c_.num_layers, c_.hidden_size, c_.intermediate_size, c_.num_labels()};
    f.gated_ffn = true;
    for (bool g : c_.global) f.layer_windows.push_back(g ? 0 : 2 * (c_.local_attention / 2) + 1);
    return f;
  }

  std::unique_ptr<BackboneModel> make_model(const BackboneShape& shape) const override {
    return std::make_unique<ModernBertModel>(c_, shape);
  }

 private:
  ModernBertConfig c_;
  ModelInfo info_;
};

}  // namespace

std::shared_ptr<const Backbone> make_modernbert_backbone(ModernBertConfig config) {
  return std::make_shared<ModernBertBackbone>(std::move(config));
}

}  // namespace ftune
