// Decoder configs from config.json (see decoder_config.h): the variants' table, then one parser.
#include "models/decoder/decoder_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "io/json_file.h"
#include "models/config_fields.h"

namespace ftune {
namespace {

// Which layers slide: none (Llama), all when sliding_window is set (Mistral), by layer_types
// when use_sliding_window is on (Qwen2 / Qwen3; before layer_types: from max_window_layers on),
// or by layer_types always (Gemma 2 / 3; without them every pattern-th layer is global).
enum class Sliding { None, All, ByTypeIfEnabled, ByType };

// What distinguishes the variants (the rest is read from the same keys for all).
struct Variant {
  const char* model_type;
  const char* architecture;
  bool qkv_bias;        // q/k/v biases always (Qwen2)
  bool attention_bias;  // reads attention_bias: q/k/v/o biases (Llama, Qwen3, Gemma)
  bool mlp_bias;        // reads mlp_bias (Llama)
  Sliding sliding;
  int pattern;          // ByType without layer_types: HF's default pattern (Gemma 2: 2; Gemma 3:
                        // sliding_window_pattern, default 6); 0 for the others
  bool qk_norm;         // q_norm / k_norm per head (Qwen3, Gemma 3)
  bool gemma;           // (1 + w) norms, embeddings x sqrt(hidden) and Gemma's defaults
  bool gemma2;          // Gemma 2 / 3: sandwich norms, query_pre_attn_scalar, hidden_activation
                        // (Gemma 1: hidden_act, its legacy "gelu" read as gelu_pytorch_tanh)
  bool softcap;         // reads attn_logit_softcapping (Gemma 2; Gemma 3's attention ignores it)
  bool local_rope;      // a second RoPE for the sliding layers (Gemma 3)
};

constexpr Variant kVariants[] = {
    {"llama", "LlamaForSequenceClassification", false, true, true, Sliding::None, 0, false, false,
     false, false, false},
    {"mistral", "MistralForSequenceClassification", false, false, false, Sliding::All, 0, false,
     false, false, false, false},
    {"qwen2", "Qwen2ForSequenceClassification", true, false, false, Sliding::ByTypeIfEnabled, 0,
     false, false, false, false, false},
    {"qwen3", "Qwen3ForSequenceClassification", false, true, false, Sliding::ByTypeIfEnabled, 0,
     true, false, false, false, false},
    {"gemma", "GemmaForSequenceClassification", false, true, false, Sliding::None, 0, false, true,
     false, false, false},
    {"gemma2", "Gemma2ForSequenceClassification", false, true, false, Sliding::ByType, 2, false,
     true, true, true, false},
    {"gemma3_text", "Gemma3TextForSequenceClassification", false, true, false, Sliding::ByType, 6,
     true, true, true, false, true},
};

// The multimodal Gemma 3 (model_type gemma3): HF's Gemma3ForSequenceClassification runs its
// text_config's model (a gemma3_text) under model.language_model.*; labels live in the outer
// config, the pad id the pooling compares with in text_config.
constexpr const char* kGemma3Multimodal = "gemma3";

const Variant* find_variant(const std::string& type) {
  for (const Variant& v : kVariants)
    if (type == v.model_type) return &v;
  return nullptr;
}

// An id key that may be an integer, a list of integers (its first one) or null / missing (-1).
int64_t token_id(const nlohmann::json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return -1;
  const nlohmann::json& v = j[key].is_array() && !j[key].empty() ? j[key][0] : j[key];
  if (!v.is_number_integer())
    throw InputError(fmt::format("{}: key '{}' must be a token id, got {}", path, key,
                                 io::json_type_name(v)));
  return v.get<int64_t>();
}

// Per layer: whether it is a sliding_attention layer (HF's layer_types).
std::vector<bool> sliding_layers(const Variant& v, const nlohmann::json& j, int64_t layers,
                                 const std::string& path) {
  std::vector<bool> sliding(layers, false);
  if (v.sliding == Sliding::None) return sliding;
  if (v.sliding == Sliding::All) return std::vector<bool>(layers, true);
  if (v.sliding == Sliding::ByTypeIfEnabled &&
      !io::get_optional_bool(j, "use_sliding_window", path).value_or(false))
    return sliding;
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    const auto& types = j["layer_types"];
    if (static_cast<int64_t>(types.size()) != layers)
      throw InputError(fmt::format("{}: layer_types has {} entries for {} layers", path,
                                   types.size(), layers));
    for (int64_t l = 0; l < layers; ++l) {
      const std::string t = types[l].is_string() ? types[l].get<std::string>() : "";
      if (t != "full_attention" && t != "sliding_attention")
        throw InputError(fmt::format(
            "{}: layer_types[{}] must be 'full_attention' or 'sliding_attention'", path, l));
      sliding[l] = t == "sliding_attention";
    }
    return sliding;
  }
  if (v.pattern > 0) {  // HF: sliding when (l + 1) % pattern != 0
    const int64_t pattern =
        v.pattern == 2 ? 2 : config_size(j, "sliding_window_pattern", path, v.pattern);
    for (int64_t l = 0; l < layers; ++l) sliding[l] = (l + 1) % pattern != 0;
    return sliding;
  }
  // Qwen2 before layer_types: layers from max_window_layers on slide.
  const int64_t from = io::get_optional_int(j, "max_window_layers", path).value_or(layers);
  for (int64_t l = std::max<int64_t>(0, from); l < layers; ++l) sliding[l] = true;
  return sliding;
}

// Per layer: 0 (full attention) or the sliding window W. Gemma's config class defaults W to 4096.
std::vector<int64_t> layer_windows(const Variant& v, const nlohmann::json& j,
                                   const std::vector<bool>& sliding, const std::string& path) {
  std::optional<int64_t> w = io::get_optional_int(j, "sliding_window", path);
  if (v.gemma && !j.contains("sliding_window")) w = 4096;
  std::vector<int64_t> window(sliding.size(), 0);
  if (!w) return window;
  if (*w <= 0)
    throw InputError(fmt::format("{}: key 'sliding_window' must be positive or null, got {}", path, *w));
  for (size_t l = 0; l < sliding.size(); ++l)
    if (sliding[l]) window[l] = *w;
  return window;
}

// A real key of Gemma's config: `fallback` when missing, nullopt when null, else positive.
std::optional<double> gemma_real(const nlohmann::json& j, const char* key, double fallback,
                                 const std::string& path) {
  if (!j.contains(key)) return fallback;
  const std::optional<double> v = io::get_optional_float(j, key, path);
  if (v && !(*v > 0 && std::isfinite(*v)))
    throw InputError(fmt::format("{}: key '{}' must be positive or null, got {}", path, key, *v));
  return v;
}

}  // namespace

const std::vector<std::string>& decoder_model_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> t;
    for (const Variant& v : kVariants) t.push_back(v.model_type);
    t.push_back(kGemma3Multimodal);
    return t;
  }();
  return types;
}

DecoderConfig DecoderConfig::from_json(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) throw InputError(fmt::format("{}: expected a JSON object", path));
  const std::string type = io::get_string(j, "model_type", path);
  if (type == kGemma3Multimodal) return gemma3_multimodal(j, path);
  const Variant* v = find_variant(type);
  if (!v) throw InputError(fmt::format("{}: model_type '{}' is not a decoder ftune reads", path, type));
  DecoderConfig c;
  c.raw = j;
  c.model_type = v->model_type;
  c.architecture = v->architecture;
  c.vocab_size = config_size(j, "vocab_size", path);
  c.hidden_size = config_size(j, "hidden_size", path);
  c.num_layers = config_size(j, "num_hidden_layers", path);
  c.num_heads = config_size(j, "num_attention_heads", path);
  c.num_kv_heads = config_size(j, "num_key_value_heads", path, c.num_heads);
  c.intermediate_size = config_size(j, "intermediate_size", path);
  c.max_position_embeddings =
      config_size(j, "max_position_embeddings", path,
                  !v->gemma ? 2048 : v->local_rope ? 131072 : 8192);
  if (c.num_layers > kConfigMaxLayers)
    throw InputError(fmt::format("{}: num_hidden_layers {} is more than the {} ftune supports",
                                 path, c.num_layers, kConfigMaxLayers));
  if (c.num_heads % c.num_kv_heads != 0)
    throw InputError(fmt::format(
        "{}: num_key_value_heads {} does not divide num_attention_heads {}", path,
        c.num_kv_heads, c.num_heads));
  if (v->gemma && !j.contains("head_dim")) {
    c.head_dim = 256;  // Gemma's config classes default head_dim (not hidden / heads)
  } else if (!j.contains("head_dim") || j["head_dim"].is_null()) {
    if (c.hidden_size % c.num_heads != 0)
      throw InputError(fmt::format(
          "{}: hidden_size {} is not a multiple of num_attention_heads {} (and no head_dim)", path,
          c.hidden_size, c.num_heads));
    c.head_dim = c.hidden_size / c.num_heads;
  } else {
    c.head_dim = config_size(j, "head_dim", path);
  }
  c.rms_norm_eps = config_real(j, "rms_norm_eps", 1e-6, false, path);
  c.attention_dropout = config_real(j, "attention_dropout", 0.0, true, path);
  c.initializer_range = config_real(j, "initializer_range", 0.02, false, path);
  const char* act_key = v->gemma2 ? "hidden_activation" : "hidden_act";
  std::string act =
      io::get_optional_string(j, act_key, path).value_or(v->gemma ? "gelu_pytorch_tanh" : "silu");
  if (v->gemma && !v->gemma2 && act == "gelu") act = "gelu_pytorch_tanh";  // HF's GemmaConfig
  c.activation = glu_act_from_hf(act, path + ": " + act_key);
  c.qkv_bias = v->qkv_bias;
  c.qk_norm = v->qk_norm;
  if (v->attention_bias) c.qkv_bias = c.o_bias = io::get_optional_bool(j, "attention_bias", path).value_or(false);
  if (v->mlp_bias) c.mlp_bias = io::get_optional_bool(j, "mlp_bias", path).value_or(false);
  if (io::get_optional_int(j, "pretraining_tp", path).value_or(1) != 1)
    throw InputError(fmt::format("{}: pretraining_tp other than 1 is not supported", path));
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (v->gemma) {
    if (io::get_optional_bool(j, "use_bidirectional_attention", path).value_or(false))
      throw InputError(fmt::format(
          "{}: use_bidirectional_attention (embedding models) is not supported; ftune reads "
          "causal Gemma decoders",
          path));
    c.norm_offset = 1.0f;
    // HF: (hidden_size ** 0.5) as a float32 tensor (cast to the weights' dtype when they are 16-bit).
    c.embed_scale = static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size)));
  }
  if (v->gemma2) {
    c.sandwich_norms = true;
    // HF: query_pre_attn_scalar ** -0.5, a Python float multiplying the fp32 scores.
    const double q = gemma_real(j, "query_pre_attn_scalar", 256, path).value_or(0);
    if (!(q > 0))
      throw InputError(fmt::format("{}: key 'query_pre_attn_scalar' must be positive", path));
    c.attention_scale = static_cast<float>(std::pow(q, -0.5));
    if (v->softcap)
      c.softcap = static_cast<float>(gemma_real(j, "attn_logit_softcapping", 50.0, path).value_or(0));
  }
  const std::vector<bool> sliding = sliding_layers(*v, j, c.num_layers, path);
  c.window = layer_windows(*v, j, sliding, path);
  if (v->local_rope) {
    c.rope = RopeConfig::for_layer_type(j, "full_attention", c.max_position_embeddings, path);
    c.local_rope = RopeConfig::for_layer_type(j, "sliding_attention", c.max_position_embeddings, path);
    c.uses_local_rope = sliding;
    if (c.local_rope.type == "longrope")
      throw InputError(fmt::format(
          "{}: longrope on the sliding layers is not supported (only on the full ones)", path));
  } else {
    c.rope = RopeConfig::from_config(j, c.max_position_embeddings, path);
    c.uses_local_rope.assign(c.num_layers, false);
  }
  const int64_t rot = c.rope.rotary_dim(c.head_dim);
  if (rot < 2 || rot % 2 != 0)
    throw InputError(fmt::format(
        "{}: RoPE rotates {} dims of head_dim {}: HF's rotary embedding needs an even count >= 2",
        path, rot, c.head_dim));
  if (c.rope.type == "longrope" &&
      (c.rope.short_factor.size() * 2 != static_cast<size_t>(c.rope.rotary_dim(c.head_dim)) ||
       c.rope.long_factor.size() != c.rope.short_factor.size()))
    throw InputError(fmt::format(
        "{}: longrope's short_factor and long_factor need rotary_dim / 2 = {} entries each", path,
        c.rope.rotary_dim(c.head_dim) / 2));
  if (v->local_rope && c.local_rope.rotary_dim(c.head_dim) != rot)
    throw InputError(fmt::format(
        "{}: the sliding layers' RoPE rotates another number of dims than the full layers'", path));
  c.pad_token_id = token_id(j, "pad_token_id", path);
  c.embedding_padding_idx = c.pad_token_id;
  if (c.pad_token_id < 0) {
    c.pad_token_id = token_id(j, "eos_token_id", path);
    c.pad_from_eos = c.pad_token_id >= 0;
  }
  if (c.pad_token_id >= c.vocab_size)
    throw InputError(fmt::format("{}: pad token id {} outside the vocabulary of {}", path,
                                 c.pad_token_id, c.vocab_size));
  c.id2label = config_labels(j, path);
  c.tie_word_embeddings = io::get_optional_bool(j, "tie_word_embeddings", path).value_or(v->gemma);
  if (v->softcap)  // Gemma 2: default 30; Gemma 3 text: default none (read when set)
    c.final_softcap = static_cast<float>(gemma_real(j, "final_logit_softcapping", 30.0, path).value_or(0));
  else if (v->gemma2)
    c.final_softcap = static_cast<float>(gemma_real(j, "final_logit_softcapping", 0.0, path).value_or(0));
  const double C = c.hidden_size, F = c.intermediate_size, K = c.num_labels();
  const double params = double(c.vocab_size) * C +
                        c.num_layers * (C * double(c.qkv_size()) + c.q_size() * C + 3 * C * F +
                                        (c.sandwich_norms ? 4 : 2) * C + c.qkv_size()) +
                        C + K * C;
  check_param_count(params, path,
                    fmt::format("vocab_size {}, hidden_size {}, num_hidden_layers {}, "
                                "intermediate_size {}",
                                c.vocab_size, c.hidden_size, c.num_layers, c.intermediate_size));
  return c;
}

DecoderConfig DecoderConfig::gemma3_multimodal(const nlohmann::json& j, const std::string& path) {
  if (!j.contains("text_config") || !j["text_config"].is_object())
    throw InputError(fmt::format(
        "{}: model_type gemma3 needs a 'text_config' object (the language model's config)", path));
  nlohmann::json text = j["text_config"];
  const std::string inner = io::get_optional_string(text, "model_type", path + ": text_config")
                                .value_or("gemma3_text");
  if (inner != "gemma3_text")
    throw InputError(fmt::format("{}: text_config.model_type must be gemma3_text, got '{}'", path,
                                 inner));
  text["model_type"] = "gemma3_text";
  text.erase("id2label");  // the outer config's labels are the classifier's
  text.erase("num_labels");
  text.erase("label2id");
  DecoderConfig c = from_json(text, path + ": text_config");
  c.raw = j;
  c.model_type = kGemma3Multimodal;
  c.architecture = "Gemma3ForSequenceClassification";
  c.prefix = "model.language_model.";
  c.id2label = config_labels(j, path);
  return c;
}

bool DecoderConfig::two_ropes() const {
  return std::find(uses_local_rope.begin(), uses_local_rope.end(), true) != uses_local_rope.end();
}

float DecoderConfig::embed_scale_in(DType compute) const {
  if (compute == DType::BF16) return bf16_to_float(float_to_bf16(embed_scale));
  if (compute == DType::F16) return f16_to_float(float_to_f16(embed_scale));
  return embed_scale;
}

DecoderConfig DecoderConfig::as_causal_lm(const std::string& path) const {
  if (model_type == kGemma3Multimodal)
    throw InputError(fmt::format(
        "{}: model_type gemma3 (the multimodal Gemma3ForConditionalGeneration) is not read as a "
        "causal LM; save its language model as a gemma3_text checkpoint (Gemma3ForCausalLM)",
        path));
  DecoderConfig c = *this;
  c.causal_lm = true;
  c.id2label.clear();
  // LlamaForSequenceClassification -> LlamaForCausalLM; Gemma 3's text model is Gemma3ForCausalLM.
  const std::string base = architecture.substr(0, architecture.find("ForSequenceClassification"));
  c.architecture = (base == "Gemma3Text" ? std::string("Gemma3") : base) + "ForCausalLM";
  return c;
}

std::string DecoderConfig::lm_head_param() const {
  return tie_word_embeddings ? prefix + "embed_tokens.weight" : "lm_head.weight";
}

nlohmann::json DecoderConfig::to_json() const {
  if (!causal_lm) return config_with_labels(raw, model_type, architecture, id2label);
  // A causal LM keeps no classification fields (a base checkpoint may carry HF's defaults).
  nlohmann::json j = raw.is_object() ? raw : nlohmann::json::object();
  j["model_type"] = model_type;
  j["architectures"] = nlohmann::json::array({architecture});
  for (const char* key : {"id2label", "label2id", "num_labels", "problem_type"}) j.erase(key);
  return j;
}

}  // namespace ftune
