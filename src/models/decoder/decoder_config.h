// The configuration of a decoder-LM classifier (Llama, Mistral, Qwen2/2.5, Qwen3, Gemma 1, Gemma 2,
// Gemma 3 text and multimodal),
// read from HF's config.json. One family, whose variants are data: each model_type names its
// architecture and which config keys switch on biases, sliding windows and the rest; the layers
// read only the resulting fields. The original JSON is kept so that saving writes back every field
// (models/config_fields.h), with the classification fields updated.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "models/rope_config.h"
#include "ops/glu.h"

namespace ftune {

struct DecoderConfig {
  std::string model_type;    // "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2",
                             // "gemma3_text", "gemma3" (multimodal: its text_config's model)
  std::string architecture;  // "LlamaForSequenceClassification", ...
  // Where the language model's weights live: "model." (model.layers.0...), or for the multimodal
  // gemma3 "model.language_model." (its vision tower is not read: text-only input never uses it).
  std::string prefix = "model.";
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, num_heads = 0, num_kv_heads = 0;
  int64_t head_dim = 0, intermediate_size = 0, max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  float norm_offset = 0.0f;  // RMSNorm weight w (0) or 1 + w (Gemma)
  GluAct activation = GluAct::Silu;
  bool qkv_bias = false;  // q_proj, k_proj, v_proj biases (Qwen2; Llama's attention_bias)
  bool o_bias = false;    // o_proj bias (Llama's attention_bias)
  bool mlp_bias = false;  // gate / up / down biases (Llama's mlp_bias)
  bool qk_norm = false;   // RMSNorm over each head of q and k before RoPE (Qwen3, Gemma 3)
  // Gemma: post_attention_layernorm on the attention output and post_feedforward_layernorm on
  // the MLP output before their residual adds, pre_feedforward_layernorm before the MLP (where
  // Llama has post_attention_layernorm).
  bool sandwich_norms = false;
  float embed_scale = 1.0f;   // multiplies the embeddings: Gemma's sqrt(hidden_size) in fp32
  float attention_scale = 0;  // multiplies q . k: 1 / sqrt(head_dim), Gemma's query_pre_attn_scalar^-1/2
  float softcap = 0;          // attention-logit soft-cap (Gemma 2's attn_logit_softcapping); 0: off
  std::vector<int64_t> window;  // per layer: HF sliding_window W, or 0 for full attention
  RopeConfig rope;              // every layer's, or (Gemma 3) the full-attention layers'
  RopeConfig local_rope;        // Gemma 3's sliding layers' (rope_local_base_freq)
  std::vector<bool> uses_local_rope;  // per layer: local_rope (Gemma 3's sliding layers)
  // The pad id HF's pooling compares with: pad_token_id, or (absent) eos_token_id; -1: neither.
  int64_t pad_token_id = -1;
  bool pad_from_eos = false;  // config.json has no pad_token_id: eos stands in
  // nn.Embedding's padding_idx (config.json's pad_token_id itself): that row gets no gradient.
  int64_t embedding_padding_idx = -1;
  float attention_dropout = 0.0f;
  float initializer_range = 0.02f;
  std::vector<std::string> id2label;
  nlohmann::json raw;
  // Causal LM (as_causal_lm, HF's *ForCausalLM): no score head and no labels; the logits are
  // hidden lm_head^T, lm_head being its own (V, C) weight or, tied (tie_word_embeddings, HF's
  // default for Gemma), embed_tokens; Gemma 2 / 3 soft-cap them at final_logit_softcapping.
  bool causal_lm = false;
  bool tie_word_embeddings = false;
  float final_softcap = 0;

  int64_t num_labels() const { return static_cast<int64_t>(id2label.size()); }
  int64_t q_size() const { return num_heads * head_dim; }
  int64_t kv_size() const { return num_kv_heads * head_dim; }
  int64_t qkv_size() const { return q_size() + 2 * kv_size(); }
  const RopeConfig& layer_rope(int64_t l) const { return uses_local_rope[l] ? local_rope : rope; }
  bool two_ropes() const;  // some layer uses local_rope
  // The embedding multiplier in `compute`: HF casts sqrt(hidden) to the weights' 16-bit dtype
  // (bf16: sqrt(3072) = 55.43 becomes 55.5).
  float embed_scale_in(DType compute) const;

  // Parses config.json content of a supported model_type; `path` names the file in errors.
  static DecoderConfig from_json(const nlohmann::json& j, const std::string& path);
  // model_type gemma3: the text_config's gemma3_text model, with the outer labels.
  static DecoderConfig gemma3_multimodal(const nlohmann::json& j, const std::string& path);
  // The causal-LM form (architecture *ForCausalLM); `path` names config.json in errors (the
  // multimodal gemma3 is refused: its language model is a gemma3_text checkpoint of its own).
  DecoderConfig as_causal_lm(const std::string& path) const;
  // The parameter holding the LM head: "lm_head.weight", or the embedding when tied.
  std::string lm_head_param() const;
  nlohmann::json to_json() const;
};

// The model types the decoder family reads, in registration order.
const std::vector<std::string>& decoder_model_types();

}  // namespace ftune
