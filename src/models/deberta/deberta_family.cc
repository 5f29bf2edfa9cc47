// The DeBERTa-v2/v3 family's Backbone (see deberta_family.h).
#include "models/deberta/deberta_family.h"

#include <algorithm>

#include "models/deberta/deberta_model.h"
#include "models/deberta/deberta_weights.h"
#include "models/family_backbone.h"
#include "models/param_init.h"

namespace ftune {
namespace {

ModelInfo info_of(const DebertaConfig& c) {
  ModelInfo i = common_info(c);
  i.model_type = "deberta-v2";
  i.architecture = "DebertaV2ForSequenceClassification";
  i.head_dim = c.head_dim();
  i.type_vocab_size = c.type_vocab_size;
  i.pad_token_id = c.pad_token_id;
  i.hidden_dropout = c.hidden_dropout;
  i.classifier_dropout = c.cls_dropout;
  return i;
}

class DebertaBackbone final : public FamilyBackbone<DebertaBackbone, DebertaConfig> {
 public:
  explicit DebertaBackbone(DebertaConfig c) : FamilyBackbone(std::move(c), info_of) {}

  static void set_dropout(DebertaConfig& c, const DropoutRates& r) {
    if (r.hidden >= 0) c.hidden_dropout = r.hidden;
    if (r.attention >= 0) c.attention_dropout = r.attention;
    if (r.classifier >= 0) c.cls_dropout = r.classifier;
  }

  void add_params(ParamTable& t) const override { add_deberta_params(c_, t); }

  // PEFT's SEQ_CLS modules_to_save: the classifier, plus the pooler when asked.
  std::vector<std::string> head_params(const AdapterConfig& adapters) const override {
    const std::vector<std::string> head = deberta_head_param_names();
    if (adapters.trains_pooler()) return head;
    return {head[2], head[3]};
  }

  bool may_initialise(const std::string& param) const override {
    const std::vector<std::string> head = deberta_head_param_names();
    return std::find(head.begin(), head.end(), param) != head.end();
  }

  bool sized_by_labels(const std::string& param) const override {
    return param == "classifier.weight" || param == "classifier.bias";
  }

  std::vector<std::string> peft_modules_to_save(const AdapterConfig& adapters) const override {
    std::vector<std::string> m = {"classifier", "score"};
    if (adapters.trains_pooler()) m.push_back("pooler");
    return m;
  }

  // The HF name, and the name without "deberta." (a DebertaV2Model saved on its own).
  std::vector<std::string> checkpoint_names(const std::string& name) const override {
    return with_unprefixed(name, "deberta.");
  }

  void init_param(const ParamSpec& spec, TensorView dst, std::mt19937_64& rng) const override {
    const bool padded = spec.name.ends_with("word_embeddings.weight");
    init_param_like_hf(spec, dst, c_.initializer_range, padded ? c_.pad_token_id : -1, rng);
  }

  std::pair<int64_t, int64_t> gemm_weight_range(const ParamTable& t) const override {
    return deberta_layer_range(c_, t);
  }

  std::vector<AdapterSite> adapter_sites() const override { return deberta_adapter_sites(c_); }

  std::vector<ClassifierModule> modules() const override {
    return deberta_modules(c_.num_layers, !c_.share_att_key && c_.c2p,
                           !c_.share_att_key && c_.p2c);
  }

  FlopModel flops() const override {
    FlopModel f = dense_flops();
    f.relative_span = c_.rel_rows();  // 2 x att_span
    f.relative_terms = int(c_.c2p) + int(c_.p2c);
    return f;
  }

  std::unique_ptr<BackboneModel> make_model(const BackboneShape& shape) const override {
    return make_deberta_model(c_, shape);
  }
};

}  // namespace

std::vector<ClassifierModule> deberta_known_modules() { return deberta_modules(128, true, true); }

std::shared_ptr<const Backbone> make_deberta_backbone(DebertaConfig config) {
  return std::make_shared<DebertaBackbone>(std::move(config));
}

}  // namespace ftune
