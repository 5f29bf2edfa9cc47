// The toy family (see toy_backbone.h): a Backbone and BackboneModel written only against the
// interface and the ops, as a new family would be.
#include "toy_backbone.h"

#include <fmt/format.h>

#include <filesystem>
#include <mutex>

#include "core/memory.h"
#include "io/json_file.h"
#include "models/adapters.h"
#include "models/backbone.h"
#include "models/hf_checkpoint.h"
#include "models/param_init.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/layer_norm.h"
#include "ops/linear.h"
#include "ops/lora.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

struct ToyConfig {
  int64_t vocab = 0, hidden = 0, positions = 0;
  float dropout = 0.1f;
  std::vector<std::string> labels;
  nlohmann::json raw;
};

// The name map: one place for every parameter name.
constexpr const char* kEmbed = "toy.embed.weight";
constexpr const char* kMix = "toy.blocks.0.mix";  // the adapter site (a PEFT module)
constexpr const char* kNorm = "toy.blocks.0.norm";
constexpr const char* kScore = "score.weight";
constexpr uint32_t kDropoutSite = 7;

// Its named modules as PEFT sees them: the mix linear takes adapters, the score head is saved whole.
std::vector<ClassifierModule> toy_modules() {
  return {{"", ModuleKind::Other},          {"toy", ModuleKind::Other},
          {"toy.embed", ModuleKind::Embedding}, {"toy.blocks.0", ModuleKind::Other},
          {kMix, ModuleKind::Adaptable},    {kNorm, ModuleKind::Other},
          {"score", ModuleKind::Head}};
}

std::string param(const char* module, const char* what) {
  return std::string(module) + "." + what;
}

class ToyModel final : public BackboneModel {
 public:
  ToyModel(const ToyConfig& c, const BackboneShape& shape) : c_(c), shape_(shape) {
    if (shape.compute != DType::F32 || !shape.device.is_cpu())
      throw InputError("the toy model computes in fp32 on the CPU only");
    if (shape.adapters.dora()) throw InputError("the toy model has no DoRA");
  }

  void buffers(BufferTable& t) override {
    const int64_t N = shape_.max_tokens, B = shape_.max_rows, C = c_.hidden;
    t.add("act/toy/x", DType::F32, {N, C}, &x_);
    t.add("act/toy/u", DType::F32, {N, C}, &u_);
    t.add("act/toy/sum", DType::F32, {N, C}, &sum_);
    t.add("act/toy/y", DType::F32, {N, C}, &y_);
    t.add("act/toy/mean", DType::F32, {N}, &mean_);
    t.add("act/toy/rstd", DType::F32, {N}, &rstd_);
    t.add("act/toy/pooled", DType::F32, {B, C}, &pooled_);
    t.add("act/toy/logits", DType::F32, {B, static_cast<int64_t>(c_.labels.size())}, &logits_);
    if (shape_.adapters.enabled()) t.add("act/toy/lora_u", DType::F32, {N, shape_.adapters.r}, &lora_u_);
    if (shape_.adapters.enabled() && shape_.adapters.dropout > 0)
      t.add("work/toy/lora_dropout", DType::F32, {N, C}, &lora_scratch_);
    if (!shape_.training) return;
    t.add("gradact/toy/pooled", DType::F32, {B, C}, &dpooled_);
    t.add("gradact/toy/y", DType::F32, {N, C}, &dy_);
    t.add("gradact/toy/sum", DType::F32, {N, C}, &dsum_);
    t.add("gradact/toy/u", DType::F32, {N, C}, &du_);
    if (shape_.adapters.enabled()) t.add("gradact/toy/lora_h", DType::F32, {N, shape_.adapters.r}, &lora_h_);
    // The embedding's backward sorts the tokens by id there (ops/embedding.h).
    t.add("work/toy/embedding", DType::F32, {embedding_backward_workspace(shape_.device, N, C)},
          &work_);
  }

  void bind(const BoundParams& p) override {
    embed_ = p.values.get(kEmbed);
    mix_w_ = p.values.get(param(kMix, "weight"));
    mix_b_ = p.values.get(param(kMix, "bias"));
    norm_w_ = p.values.get(param(kNorm, "weight"));
    norm_b_ = p.values.get(param(kNorm, "bias"));
    score_ = p.values.get(kScore);
    g_embed_ = p.grads.get(kEmbed);
    g_mix_w_ = p.grads.get(param(kMix, "weight"));
    g_mix_b_ = p.grads.get(param(kMix, "bias"));
    g_norm_w_ = p.grads.get(param(kNorm, "weight"));
    g_norm_b_ = p.grads.get(param(kNorm, "bias"));
    g_score_ = p.grads.get(kScore);
    adapters_ = p.adapters;
    adapter_grads_ = p.adapter_grads;
  }

  TensorView forward(const TokenInputs& in, const DropoutPlan& d) override {
    const int64_t N = in.tokens(), C = c_.hidden, B = in.B;
    const TensorView x = x_.prefix({N, C}), u = u_.prefix({N, C});
    embedding_forward(x, in.ids, embed_, false);
    linear_forward(u, x, mix_w_, mix_b_);
    if (adapter().defined()) lora_forward(u, lora_u_.prefix({N, adapters_.r}), x, adapter().a, adapter().b,
                                adapters_.scale, lora_dropout(in, d));
    dropout_forward(u, u, p(d), key(d), rows(in, d));
    add_layer_norm_forward(y_.prefix({N, C}), sum_.prefix({N, C}), mean_.prefix({N}),
                           rstd_.prefix({N}), x, u, norm_w_, norm_b_, 1e-5f);
    // Mean pooling over each row's real tokens (host loops: the toy runs on the CPU).
    const float* y = y_.data_as<float>();
    float* z = pooled_.data_as<float>();
    for (int64_t b = 0; b < B; ++b) {
      const auto [t0, n] = row_tokens(in, b);
      for (int64_t c = 0; c < C; ++c) {
        double sum = 0;
        for (int64_t t = t0; t < t0 + n; ++t) sum += y[t * C + c];
        z[b * C + c] = static_cast<float>(sum / n);
      }
    }
    const TensorView logits = logits_.prefix({B, static_cast<int64_t>(c_.labels.size())});
    linear_forward(logits, pooled_.prefix({B, C}), score_, TensorView());
    return logits;
  }

  void backward(TensorView dlogits, const TokenInputs& in, const DropoutPlan& d) override {
    const int64_t N = in.tokens(), C = c_.hidden, B = in.B;
    const TensorView dy = dy_.prefix({N, C}), dsum = dsum_.prefix({N, C}), du = du_.prefix({N, C});
    linear_backward(dpooled_.prefix({B, C}), g_score_, TensorView(), dlogits, pooled_.prefix({B, C}),
                    score_);
    fill_zero(dy);
    float* g = dy.data_as<float>();
    const float* dz = dpooled_.data_as<float>();
    for (int64_t b = 0; b < B; ++b) {
      const auto [t0, n] = row_tokens(in, b);
      for (int64_t t = t0; t < t0 + n; ++t)
        for (int64_t c = 0; c < C; ++c) g[t * C + c] = dz[b * C + c] / static_cast<float>(n);
    }
    layer_norm_backward(dsum, g_norm_w_, g_norm_b_, dy, sum_.prefix({N, C}), norm_w_,
                        mean_.prefix({N}), rstd_.prefix({N}));
    dropout_backward(du, dsum, p(d), key(d), rows(in, d));
    // dx = dsum (the residual) + du W (+ the LoRA branch): into dsum, then the embedding.
    const bool need_dx = g_embed_.defined();
    if (need_dx || g_mix_w_.defined())
      linear_backward(need_dx ? dsum : TensorView(), g_mix_w_, g_mix_b_, du, x_.prefix({N, C}),
                      mix_w_, /*accumulate_dinp=*/true);
    if (adapter().defined())
      lora_backward(need_dx ? dsum : TensorView(), adapter_grads_.at(0, 0).a,
                    adapter_grads_.at(0, 0).b, lora_h_.prefix({N, adapters_.r}), du, x_.prefix({N, C}),
                    lora_u_.prefix({N, adapters_.r}), adapter().a, adapter().b, adapters_.scale,
                    /*accumulate_dinp=*/true, lora_dropout(in, d));
    if (need_dx) embedding_backward(g_embed_, dsum, in.ids, -1, work_);
  }

  TensorView hidden() const override { return y_; }

 private:
  const AdapterWeights& adapter() const {
    static const AdapterWeights none;
    return adapters_.any() ? adapters_.at(0, 0) : none;
  }
  // Row b's real tokens: their first index and count.
  static std::pair<int64_t, int64_t> row_tokens(const TokenInputs& in, int64_t b) {
    if (in.packed())
      return {in.host_cu_seqlens[b], in.host_cu_seqlens[b + 1] - in.host_cu_seqlens[b]};
    const int32_t* mask = in.mask.data_as<int32_t>() + b * in.T;
    int64_t n = in.T;
    while (n > 1 && mask[n - 1] == 0) --n;
    return {b * in.T, n};
  }
  float p(const DropoutPlan& d) const { return d.training ? c_.dropout : 0.0f; }
  RngKey key(const DropoutPlan& d) const { return RngKey{d.seed, kDropoutSite, d.offset, d.micro}; }
  DropoutRows rows(const TokenInputs& in, const DropoutPlan& d) const { return dropout_rows(d, in); }
  LoraDropout lora_dropout(const TokenInputs& in, const DropoutPlan& d) const {
    LoraDropout drop;
    drop.p = d.training ? adapters_.dropout : 0.0f;
    drop.rng = RngKey{d.seed, adapter_dropout_site(0, 0), d.offset, d.micro};
    drop.rows = rows(in, d);
    drop.scratch = lora_scratch_;
    return drop;
  }

  ToyConfig c_;
  BackboneShape shape_;
  TensorView embed_, mix_w_, mix_b_, norm_w_, norm_b_, score_;
  TensorView g_embed_, g_mix_w_, g_mix_b_, g_norm_w_, g_norm_b_, g_score_;
  AdapterSet adapters_, adapter_grads_;
  TensorView x_, u_, sum_, y_, mean_, rstd_, pooled_, logits_, lora_u_, lora_scratch_;
  TensorView dpooled_, dy_, dsum_, du_, lora_h_, work_;
};

class ToyBackbone final : public Backbone {
 public:
  explicit ToyBackbone(ToyConfig c) : c_(std::move(c)) {
    info_.model_type = "ftune-toy";
    info_.architecture = "ToyForSequenceClassification";
    info_.num_layers = 1;
    info_.hidden_size = c_.hidden;
    info_.num_heads = info_.num_kv_heads = 1;
    info_.head_dim = c_.hidden;
    info_.intermediate_size = c_.hidden;
    info_.vocab_size = c_.vocab;
    info_.type_vocab_size = 0;  // reads no token types
    info_.max_position_embeddings = info_.max_tokens = c_.positions;
    info_.hidden_dropout = info_.attention_dropout = info_.classifier_dropout = c_.dropout;
    info_.id2label = c_.labels;
    info_.packing = true;
  }
  const ModelInfo& info() const override { return info_; }
  std::shared_ptr<const Backbone> with_labels(std::vector<std::string> labels) const override {
    ToyConfig c = c_;
    c.labels = std::move(labels);
    return std::make_shared<ToyBackbone>(std::move(c));
  }
  std::shared_ptr<const Backbone> with_dropout(const DropoutRates& r) const override {
    ToyConfig c = c_;
    if (r.hidden >= 0) c.dropout = r.hidden;
    return std::make_shared<ToyBackbone>(std::move(c));
  }
  nlohmann::json config_json() const override {
    nlohmann::json j = c_.raw;
    j["model_type"] = info_.model_type;
    j["architectures"] = {info_.architecture};
    nlohmann::json id2 = nlohmann::json::object();
    for (size_t i = 0; i < c_.labels.size(); ++i) id2[std::to_string(i)] = c_.labels[i];
    j["id2label"] = id2;
    j.erase("num_labels");
    return j;
  }
  void add_params(ParamTable& t) const override {
    const int64_t C = c_.hidden;
    t.add(kEmbed, {c_.vocab, C});
    t.add(param(kMix, "weight"), {C, C});
    t.add(param(kMix, "bias"), {C});
    t.add(param(kNorm, "weight"), {C});
    t.add(param(kNorm, "bias"), {C});
    t.add(kScore, {static_cast<int64_t>(c_.labels.size()), C});
  }
  std::vector<std::string> head_params(const AdapterConfig&) const override { return {kScore}; }
  bool may_initialise(const std::string& name) const override { return name == kScore; }
  bool sized_by_labels(const std::string& name) const override { return name == kScore; }
  std::vector<std::string> peft_modules_to_save(const AdapterConfig&) const override {
    return {"score"};
  }
  std::vector<std::string> checkpoint_names(const std::string& name) const override {
    return {name};
  }
  void init_param(const ParamSpec& spec, TensorView dst, std::mt19937_64& rng) const override {
    HostTensor host(DType::F32, spec.shape);
    std::normal_distribution<float> normal(0.0f, 0.2f);
    const bool ones = spec.name == param(kNorm, "weight"), zeros = spec.name.ends_with(".bias");
    for (int64_t i = 0; i < host.numel(); ++i)
      host.data<float>()[i] = ones ? 1.0f : zeros ? 0.0f : normal(rng);
    copy(dst, host.view());
  }
  std::pair<int64_t, int64_t> gemm_weight_range(const ParamTable& t) const override {
    const ParamSpec& w = t.at(param(kMix, "weight"));
    return {w.offset, w.shape.numel()};
  }
  std::vector<AdapterSite> adapter_sites() const override {
    return {AdapterSite{0, 0, kMix, c_.hidden, c_.hidden}};
  }
  std::vector<ClassifierModule> modules() const override { return toy_modules(); }
  void row_positions(const int32_t*, int64_t n, int32_t* pos) const override {
    for (int64_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>(t);
  }
  FlopModel flops() const override {
    // One C x C GEMM per token (the FLOP model's attention terms are not this model's).
    return FlopModel{1, c_.hidden, 0, static_cast<int64_t>(c_.labels.size())};
  }
  std::unique_ptr<BackboneModel> make_model(const BackboneShape& shape) const override {
    return std::make_unique<ToyModel>(c_, shape);
  }

 private:
  ToyConfig c_;
  ModelInfo info_;
};

}  // namespace

void register_toy_backbone() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_backbone("ftune-toy", [](const nlohmann::json& j, const std::string& path) {
      ToyConfig c;
      c.raw = j;
      c.vocab = io::get_int(j, "vocab_size", path);
      c.hidden = io::get_int(j, "hidden_size", path);
      c.positions = io::get_int(j, "max_position_embeddings", path);
      c.dropout =
          static_cast<float>(io::get_optional_float(j, "hidden_dropout_prob", path).value_or(0.1));
      if (j.contains("id2label"))
        for (size_t i = 0; i < j["id2label"].size(); ++i)
          c.labels.push_back(j["id2label"][std::to_string(i)].get<std::string>());
      else
        for (int64_t i = 0; i < io::get_optional_int(j, "num_labels", path).value_or(2); ++i)
          c.labels.push_back(fmt::format("LABEL_{}", i));
      return std::make_shared<ToyBackbone>(std::move(c));
    }, toy_modules);
  });
}

void write_toy_model(const std::string& dir, int num_labels) {
  register_toy_backbone();
  const nlohmann::json j = {{"model_type", "ftune-toy"}, {"vocab_size", 30522},
                            {"hidden_size", 16},         {"max_position_embeddings", 64},
                            {"hidden_dropout_prob", 0.1}, {"num_labels", num_labels}};
  write_random_model(j, dir, 5);
}

}  // namespace ftune::test
