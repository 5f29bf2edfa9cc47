// The decoder family's Backbone and BackboneModel (see decoder_family.h).
#include "models/decoder_family.h"

#include "core/error.h"
#include "core/memory.h"
#include "models/decoder.h"

namespace ftune {
namespace {

ModelInfo info_of(const DecoderConfig& c) {
  ModelInfo i;
  i.model_type = c.model_type;
  i.architecture = c.architecture;
  i.num_layers = c.num_layers;
  i.hidden_size = c.hidden_size;
  i.num_heads = c.num_heads;
  i.num_kv_heads = c.num_kv_heads;
  i.head_dim = c.head_dim;
  i.intermediate_size = c.intermediate_size;
  i.vocab_size = c.vocab_size;
  i.type_vocab_size = 0;  // no token types
  i.max_position_embeddings = i.max_tokens = c.max_position_embeddings;
  i.pad_token_id = c.pad_token_id >= 0 ? c.pad_token_id : 0;
  i.attention_dropout = c.attention_dropout;
  i.id2label = c.id2label;
  i.packing = true;
  return i;
}

class DecoderModel final : public BackboneModel {
 public:
  DecoderModel(const DecoderConfig& c, const BackboneShape& shape) : c_(c), shape_(shape) {}

  void buffers(BufferTable& t) override { decoder_buffers(c_, shape_, a_, t); }

  void bind(const BoundParams& p) override {
    w_ = bind_decoder_weights(c_, p.values);
    w_.adapters = p.adapters;
    if (p.shadow.table) w_.shadow = bind_decoder_weights(c_, p.shadow).layers;
    if (shape_.training) {
      g_ = bind_decoder_weights(c_, p.grads);
      g_.adapters = p.adapter_grads;
    }
    upload_inv_freq(c_.rope, a_.inv_freq);
    if (c_.rope.type == "longrope") upload_inv_freq(c_.rope, a_.inv_freq_long, true);
    if (c_.two_ropes()) upload_inv_freq(c_.local_rope, a_.inv_freq_local);
  }

  TensorView forward(const TokenInputs& in, const DropoutPlan& d) override {
    logits_ = decoder_forward(c_, w_, a_, in, d);
    const int64_t N = in.tokens(), C = c_.hidden_size;
    hidden_ = in.packed() ? a_.hidden.prefix({N, C}) : a_.hidden.prefix({in.B, in.T, C});
    return logits_;
  }

  void backward(TensorView dlogits, const TokenInputs& in, const DropoutPlan& d) override {
    decoder_backward(c_, w_, g_, a_, dlogits, in, d);
  }

  TensorView hidden() const override { return hidden_; }

 private:
  void upload_inv_freq(const RopeConfig& rope, TensorView dst, bool long_seq = false) const {
    const std::vector<float> inv = rope.inv_freq(c_.head_dim, long_seq);
    HostTensor host(DType::F32, Shape{static_cast<int64_t>(inv.size())});
    std::copy(inv.begin(), inv.end(), host.data<float>());
    copy(dst, host.view());
  }

  DecoderConfig c_;
  BackboneShape shape_;
  DecoderWeights w_, g_;
  DecoderActs a_;
  TensorView logits_, hidden_;
};

class DecoderBackbone final : public Backbone {
 public:
  explicit DecoderBackbone(DecoderConfig c) : c_(std::move(c)), info_(info_of(c_)) {}

  const ModelInfo& info() const override { return info_; }

  std::shared_ptr<const Backbone> with_labels(std::vector<std::string> labels) const override {
    if (labels.empty()) throw InputError("a classifier needs at least one label");
    DecoderConfig c = c_;
    c.id2label = std::move(labels);
    return std::make_shared<DecoderBackbone>(std::move(c));
  }

  // Decoders have attention dropout only (HF's attention_dropout); the other rates do not apply.
  std::shared_ptr<const Backbone> with_dropout(const DropoutRates& r) const override {
    DecoderConfig c = c_;
    if (r.attention >= 0) c.attention_dropout = r.attention;
    return std::make_shared<DecoderBackbone>(std::move(c));
  }

  nlohmann::json config_json() const override { return c_.to_json(); }

  void add_params(ParamTable& t) const override { add_decoder_params(c_, t); }

  std::vector<std::string> head_params(const AdapterConfig&) const override { return {"score.weight"}; }
  bool may_initialise(const std::string& p) const override { return p == "score.weight"; }
  bool sized_by_labels(const std::string& p) const override { return p == "score.weight"; }
  std::vector<std::string> peft_modules_to_save(const AdapterConfig&) const override {
    return {"classifier", "score"};  // PEFT's SEQ_CLS default list
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
    return decoder_modules(c_.num_layers, c_.qk_norm, c_.sandwich_norms, c_.prefix);
  }

  // HF's decoders count positions 0..T-1 over the whole row, padding included (left padding too).
  void row_positions(const int32_t*, int64_t n, int32_t* pos) const override {
    for (int64_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>(t);
  }

  FlopModel flops() const override {
    FlopModel f{c_.num_layers, c_.hidden_size, c_.intermediate_size, c_.num_labels()};
    f.q_hidden = c_.q_size();
    f.kv_hidden = c_.kv_size();
    f.gated_ffn = true;
    f.layer_windows = c_.window;
    return f;
  }

  std::unique_ptr<BackboneModel> make_model(const BackboneShape& shape) const override {
    return std::make_unique<DecoderModel>(c_, shape);
  }

 private:
  DecoderConfig c_;
  ModelInfo info_;
};

}  // namespace

std::shared_ptr<const Backbone> make_decoder_backbone(DecoderConfig config) {
  return std::make_shared<DecoderBackbone>(std::move(config));
}

}  // namespace ftune
