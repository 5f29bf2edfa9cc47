// The ModernBERT family's Backbone and BackboneModel (see modernbert_family.h).
#include "models/modernbert/modernbert_family.h"

#include <fmt/format.h>

#include "core/memory.h"
#include "models/family_backbone.h"
#include "models/modernbert/modernbert.h"

namespace ftune {
namespace {

ModelInfo info_of(const ModernBertConfig& c) {
  ModelInfo i = common_info(c);
  i.model_type = "modernbert";
  i.architecture = "ModernBertForSequenceClassification";
  i.head_dim = c.head_dim;
  i.type_vocab_size = 0;  // no token types
  i.pad_token_id = c.pad_token_id >= 0 ? c.pad_token_id : 0;
  i.hidden_dropout = c.mlp_dropout;
  i.classifier_dropout = c.classifier_dropout;
  return i;
}

// ModernBERT as free functions (modernbert.h), and its two RoPE tables.
struct ModernBertOps {
  using Config = ModernBertConfig;
  using Weights = ModernBertWeights;
  using Acts = ModernBertActs;
  static constexpr auto buffers = modernbert_buffers;
  static constexpr auto bind = bind_modernbert_weights;
  static constexpr auto forward = modernbert_forward;
  static constexpr auto backward = modernbert_backward;
  static void tables(const ModernBertConfig& c, ModernBertActs& a) {
    upload_inv_freq(a.global_inv_freq, c.global_rope, c.head_dim);
    upload_inv_freq(a.local_inv_freq, c.local_rope, c.head_dim);
  }
};

class ModernBertBackbone final : public FamilyBackbone<ModernBertBackbone, ModernBertConfig> {
 public:
  explicit ModernBertBackbone(ModernBertConfig c) : FamilyBackbone(std::move(c), info_of) {}

  // training.hidden_dropout sets HF's embedding_dropout and mlp_dropout; attention_dropout covers
  // the probabilities and the attention output (HF's out_drop), classifier_dropout the head's.
  static void set_dropout(ModernBertConfig& c, const DropoutRates& r) {
    if (r.hidden >= 0) c.embedding_dropout = c.mlp_dropout = r.hidden;
    if (r.attention >= 0) c.attention_dropout = r.attention;
    if (r.classifier >= 0) c.classifier_dropout = r.classifier;
  }

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
    return with_unprefixed(name, "model.");
  }

  void init_param(const ParamSpec& spec, TensorView dst, std::mt19937_64& rng) const override {
    init_modernbert_param(c_, spec, dst, rng);
  }

  std::pair<int64_t, int64_t> gemm_weight_range(const ParamTable& t) const override {
    return modernbert_layer_range(c_, t);
  }

  std::vector<AdapterSite> adapter_sites() const override { return modernbert_adapter_sites(c_); }
  std::vector<ClassifierModule> modules() const override { return modernbert_modules(c_.num_layers); }

  // Per layer: global layers see the whole row, local ones 2 (local_attention / 2) + 1 keys.
  FlopModel flops() const override {
    FlopModel f = dense_flops();
    f.gated_ffn = true;
    for (bool g : c_.global) f.layer_windows.push_back(g ? 0 : 2 * (c_.local_attention / 2) + 1);
    return f;
  }

  std::unique_ptr<BackboneModel> make_model(const BackboneShape& shape) const override {
    return std::make_unique<FamilyModel<ModernBertOps>>(c_, shape);
  }
};

}  // namespace

std::vector<ClassifierModule> modernbert_known_modules() { return modernbert_modules(128); }

std::shared_ptr<const Backbone> make_modernbert_backbone(ModernBertConfig config) {
  return std::make_shared<ModernBertBackbone>(std::move(config));
}

}  // namespace ftune
