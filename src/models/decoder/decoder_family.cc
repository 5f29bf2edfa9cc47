// The decoder family's Backbone and BackboneModel (see decoder_family.h).
#include "models/decoder/decoder_family.h"

#include "core/memory.h"
#include "models/decoder/decoder.h"
#include "models/family_backbone.h"

namespace ftune {
namespace {

ModelInfo info_of(const DecoderConfig& c) {
  ModelInfo i = common_info(c);
  i.model_type = c.model_type;
  i.architecture = c.architecture;
  i.num_kv_heads = c.num_kv_heads;
  i.head_dim = c.head_dim;
  i.type_vocab_size = 0;  // no token types
  i.pad_token_id = c.pad_token_id >= 0 ? c.pad_token_id : 0;
  i.causal_lm = c.causal_lm;
  if (c.causal_lm) i.lm_head = c.lm_head_param(), i.lm_softcap = c.final_softcap;
  return i;
}

// The decoder as free functions (decoder.h), and its RoPE tables.
struct DecoderOps {
  using Config = DecoderConfig;
  using Weights = DecoderWeights;
  using Acts = DecoderActs;
  static constexpr auto buffers = decoder_buffers;
  static constexpr auto bind = bind_decoder_weights;
  static constexpr auto forward = decoder_forward;
  static constexpr auto backward = decoder_backward;
  static void tables(const DecoderConfig& c, DecoderActs& a) {
    upload_inv_freq(a.inv_freq, c.rope, c.head_dim);
    if (c.rope.type == "longrope") upload_inv_freq(a.inv_freq_long, c.rope, c.head_dim, true);
    if (c.two_ropes()) upload_inv_freq(a.inv_freq_local, c.local_rope, c.head_dim);
  }
};

class DecoderBackbone final : public FamilyBackbone<DecoderBackbone, DecoderConfig> {
 public:
  explicit DecoderBackbone(DecoderConfig c) : FamilyBackbone(std::move(c), info_of) {}

  // Decoders have attention dropout only (HF's attention_dropout); the other rates do not apply.
  static void set_dropout(DecoderConfig& c, const DropoutRates& r) {
    if (r.attention >= 0) c.attention_dropout = r.attention;
  }

  void add_params(ParamTable& t) const override { add_decoder_params(c_, t); }

  // A causal LM has no head that trains with adapters (PEFT's CAUSAL_LM leaves lm_head frozen)
  // and nothing to initialise afresh: a checkpoint without lm_head (untied) is an error.
  std::vector<std::string> head_params(const AdapterConfig&) const override {
    if (c_.causal_lm) return {};
    return {"score.weight"};
  }
  bool may_initialise(const std::string& p) const override {
    return !c_.causal_lm && p == "score.weight";
  }
  bool sized_by_labels(const std::string& p) const override {
    return !c_.causal_lm && p == "score.weight";
  }
  std::vector<std::string> peft_modules_to_save(const AdapterConfig&) const override {
    if (c_.causal_lm) return {};
    return {"classifier", "score"};  // PEFT's SEQ_CLS default list
  }
  std::shared_ptr<const Backbone> as_causal_lm() const override {
    return std::make_shared<DecoderBackbone>(c_.as_causal_lm("config.json"));
  }

  // The HF name, and the name without the prefix (a base LlamaModel / Qwen2Model / Gemma3TextModel
  // saved on its own); the multimodal Gemma 3's also as transformers 4 saved it
  // (Gemma3ForConditionalGeneration: language_model.model.*).
  std::vector<std::string> checkpoint_names(const std::string& name) const override {
    if (name.rfind(c_.prefix, 0) != 0) return {name};
    const std::string rest = name.substr(c_.prefix.size());
    if (c_.prefix == "model.") return {name, rest};
    return {name, rest, "language_model.model." + rest};
  }

  void init_param(const ParamSpec& spec, TensorView dst, std::mt19937_64& rng) const override {
    init_decoder_param(c_, spec, dst, rng);
  }

  std::pair<int64_t, int64_t> gemm_weight_range(const ParamTable& t) const override {
    return decoder_layer_range(c_, t);
  }

  std::vector<AdapterSite> adapter_sites() const override { return decoder_adapter_sites(c_); }
  std::vector<ClassifierModule> modules() const override {
    return decoder_modules(c_.num_layers, c_.qk_norm, c_.sandwich_norms, c_.prefix, c_.causal_lm);
  }

  FlopModel flops() const override {
    FlopModel f = dense_flops();
    f.q_hidden = c_.q_size();
    f.kv_hidden = c_.kv_size();
    f.gated_ffn = true;
    f.layer_windows = c_.window;
    return f;
  }

  std::unique_ptr<BackboneModel> make_model(const BackboneShape& shape) const override {
    return std::make_unique<FamilyModel<DecoderOps>>(c_, shape);
  }
};

}  // namespace

std::shared_ptr<const Backbone> make_decoder_backbone(DecoderConfig config) {
  return std::make_shared<DecoderBackbone>(std::move(config));
}

std::vector<ClassifierModule> decoder_known_modules(const std::string& prefix) {
  return decoder_modules(128, true, true, prefix);
}

}  // namespace ftune
