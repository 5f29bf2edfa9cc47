// The BERT family's Backbone and BackboneModel (see bert_family.h).
#include "models/bert/bert_family.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/memory.h"
#include "models/bert/classification_head.h"
#include "models/bert/encoder.h"
#include "models/family_backbone.h"
#include "models/param_init.h"

namespace ftune {
namespace {

ModelInfo info_of(const EncoderConfig& c) {
  ModelInfo i = common_info(c);
  i.model_type = c.model_type();
  i.architecture = c.architecture();
  i.head_dim = c.num_heads > 0 ? c.head_dim() : 0;
  i.type_vocab_size = c.type_vocab_size;
  // RoBERTa's positions start after the pad id.
  i.max_tokens = c.max_position_embeddings - (c.roberta_like() ? c.pad_token_id + 1 : 0);
  i.pad_token_id = c.pad_token_id;
  i.hidden_dropout = c.hidden_dropout;
  i.classifier_dropout = c.classifier_dropout;
  return i;
}

class BertModel final : public BackboneModel {
 public:
  BertModel(const EncoderConfig& c, const BackboneShape& shape) : c_(c), shape_(shape) {}

  void buffers(BufferTable& t) override {
    encoder_buffers(c_, shape_, acts_, t);
    head_buffers(c_, shape_.max_rows, shape_.training, shape_.adapters, head_acts_, t);
  }

  void bind(const BoundParams& p) override {
    w_ = bind_encoder_weights(c_, p.values);
    w_.adapters = p.adapters;
    if (p.shadow.table) w_.shadow = bind_layer_weights(c_, p.shadow);
    head_w_ = bind_head_weights(c_, p.values);
    if (shape_.training) {
      // Frozen parameters (adapters) have undefined gradient views; their GEMMs are skipped.
      g_ = bind_encoder_weights(c_, p.grads);
      g_.adapters = p.adapter_grads;
      head_g_ = bind_head_weights(c_, p.grads);
    }
  }

  TensorView forward(const TokenInputs& in, const DropoutPlan& d) override {
    hidden_ = encoder_forward(c_, w_, acts_, in, d);
    return head_forward(c_, head_w_, head_acts_, hidden_, in, d, w_.adapters);
  }

  void backward(TensorView dlogits, const TokenInputs& in, const DropoutPlan& d) override {
    // The head's gradient of the encoder's output: every token's, or the first tokens' (B, 1, C).
    const TensorView dhidden = acts_.first_token_last
                                   ? acts_.grad_out.prefix({in.B, 1, c_.hidden_size})
                                   : token_rows(acts_.grad_out, in, c_.hidden_size);
    head_backward(c_, head_w_, head_g_, head_acts_, dlogits, dhidden, in, d, w_.adapters,
                  g_.adapters);
    encoder_backward(c_, w_, g_, acts_, in, d);
  }

  TensorView hidden() const override { return hidden_; }

 private:
  EncoderConfig c_;
  BackboneShape shape_;
  EncoderWeights w_, g_;
  HeadWeights head_w_, head_g_;
  EncoderActivations acts_;
  HeadActivations head_acts_;
  TensorView hidden_;
};

class BertBackbone final : public FamilyBackbone<BertBackbone, EncoderConfig> {
 public:
  explicit BertBackbone(EncoderConfig c) : FamilyBackbone(std::move(c), info_of) {}

  static void set_dropout(EncoderConfig& c, const DropoutRates& r) {
    if (r.hidden >= 0) c.hidden_dropout = r.hidden;
    if (r.attention >= 0) c.attention_dropout = r.attention;
    if (r.classifier >= 0) c.classifier_dropout = r.classifier;
  }

  void add_params(ParamTable& t) const override {
    add_encoder_params(c_, t);
    add_head_params(c_, t);
  }

  // PEFT's SEQ_CLS modules_to_save: the classifier (RoBERTa: its dense + out_proj), plus BERT's
  // pooler when asked.
  std::vector<std::string> head_params(const AdapterConfig& adapters) const override {
    const std::vector<std::string> head = head_param_names(c_);
    if (c_.roberta_like() || adapters.trains_pooler()) return head;
    return {head[2], head[3]};
  }

  bool may_initialise(const std::string& param) const override {
    const std::vector<std::string> head = head_param_names(c_);
    return std::find(head.begin(), head.end(), param) != head.end();
  }

  bool sized_by_labels(const std::string& param) const override {
    const std::vector<std::string> head = head_param_names(c_);  // dense/pooler, then output
    return param == head[2] || param == head[3];
  }

  std::vector<std::string> peft_modules_to_save(const AdapterConfig& adapters) const override {
    std::vector<std::string> m = {"classifier", "score"};
    if (c_.variant == BertVariant::Bert && adapters.trains_pooler()) m.push_back("pooler");
    return m;
  }

  // The exact HF name, the name without the encoder prefix (base models saved on their own), and
  // TF-era LayerNorm gamma/beta spellings.
  std::vector<std::string> checkpoint_names(const std::string& name) const override {
    const std::string prefix = c_.weight_prefix();
    std::vector<std::string> base{name};
    if (name.rfind(prefix + ".", 0) == 0) base.push_back(name.substr(prefix.size() + 1));
    std::vector<std::string> out;
    for (const std::string& b : base) {
      out.push_back(b);
      if (b.ends_with("LayerNorm.weight")) out.push_back(b.substr(0, b.size() - 6) + "gamma");
      if (b.ends_with("LayerNorm.bias")) out.push_back(b.substr(0, b.size() - 4) + "beta");
    }
    return out;
  }

  // HF's _init_weights: the padding row of the word embeddings (and of RoBERTa's position
  // embeddings) is 0.
  void init_param(const ParamSpec& spec, TensorView dst, std::mt19937_64& rng) const override {
    const bool padded = spec.name.ends_with("word_embeddings.weight") ||
                        (c_.roberta_like() && spec.name.ends_with("position_embeddings.weight"));
    init_param_like_hf(spec, dst, c_.initializer_range, padded ? c_.pad_token_id : -1, rng);
  }

  std::pair<int64_t, int64_t> gemm_weight_range(const ParamTable& t) const override {
    return encoder_layer_range(c_, t);
  }

  // The encoder's six linear modules per layer, then BERT's pooler.dense (past the last layer).
  std::vector<AdapterSite> adapter_sites() const override {
    std::vector<AdapterSite> sites = encoder_adapter_sites(c_);
    if (c_.variant == BertVariant::Bert) sites.push_back(pooler_adapter_site(c_));
    return sites;
  }

  std::vector<ClassifierModule> modules() const override {
    return bert_classifier_modules(c_.variant == BertVariant::Bert, c_.num_layers);
  }

  // RoBERTa's positions count the real tokens after the pad id (the pad id at padding).
  void row_positions(const int32_t* ids, int64_t n, int32_t* pos) const override {
    int32_t count = 0;
    for (int64_t t = 0; t < n; ++t) {
      if (!c_.roberta_like())
        pos[t] = static_cast<int32_t>(t);
      else if (ids[t] != c_.pad_token_id)
        pos[t] = static_cast<int32_t>(c_.pad_token_id + 1 + count++);
      else
        pos[t] = static_cast<int32_t>(c_.pad_token_id);
    }
  }

  FlopModel flops() const override { return dense_flops(); }

  std::unique_ptr<BackboneModel> make_model(const BackboneShape& shape) const override {
    return std::make_unique<BertModel>(c_, shape);
  }
};

}  // namespace

std::shared_ptr<const Backbone> make_bert_backbone(EncoderConfig config) {
  return std::make_shared<BertBackbone>(std::move(config));
}

EncoderConfig::operator ModelSpec() const {
  return ModelSpec(make_bert_backbone(*this));
}

std::vector<ClassifierModule> bert_classifier_modules(bool bert, int64_t layers) {
  const std::string p = bert ? "bert" : "roberta";
  const ModuleKind A = ModuleKind::Adaptable, O = ModuleKind::Other;
  std::vector<ClassifierModule> m = {{"", O}, {p, O}, {p + ".embeddings", O}};
  for (const char* e : {"word_embeddings", "position_embeddings", "token_type_embeddings"})
    m.push_back({p + ".embeddings." + e, ModuleKind::Embedding});
  for (const char* e : {"LayerNorm", "dropout"}) m.push_back({p + ".embeddings." + e, O});
  m.push_back({p + ".encoder", O});
  m.push_back({p + ".encoder.layer", O});
  for (int64_t l = 0; l < layers; ++l) {
    const std::string q = fmt::format("{}.encoder.layer.{}", p, l);
    const std::pair<const char*, ModuleKind> layer[] = {
        {"", O},
        {".attention", O},
        {".attention.self", O},
        {".attention.self.query", A},
        {".attention.self.key", A},
        {".attention.self.value", A}};
    for (const auto& [suffix, kind] : layer) m.push_back({q + suffix, kind});
    add_bert_layer_tail_modules(m, q);
  }
  if (bert) {
    m.push_back({"bert.pooler", O});
    m.push_back({"bert.pooler.dense", A});
    m.push_back({"bert.pooler.activation", O});
    m.push_back({"dropout", O});
    m.push_back({"classifier", ModuleKind::Head});
  } else {
    m.push_back({"classifier", O});
    m.push_back({"classifier.dense", ModuleKind::Head});
    m.push_back({"classifier.dropout", O});
    m.push_back({"classifier.out_proj", ModuleKind::Head});
  }
  return m;
}

}  // namespace ftune
