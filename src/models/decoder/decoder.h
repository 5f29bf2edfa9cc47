// The decoder stack of Llama / Mistral / Qwen2 / Qwen3 / Gemma 2 / Gemma 3 classifiers
// (models/decoder/decoder_config.h) with explicit
// forward and backward passes over planned buffers; one code path, the variants' differences are
// config fields. Gradient rule: parameter gradients accumulate (+=), activation gradients
// overwrite (=).
//
//   x_0   = embed_tokens[ids] (x embed_scale: Gemma's sqrt(C))  (N, C)
//   layer l (pre-norm; RMSNorm's weight is w, or 1 + w for Gemma):
//     h1  = RMSNorm(x_l) w_in                                  rstd1 (N) saved
//     qkv = h1 [Wq; Wk; Wv]^T (+ biases)                       (N, Hq D + 2 Hkv D), one GEMM
//     q, k <- RMSNorm per head (Qwen3's q_norm / k_norm)       from qkv_raw, rstd_q / rstd_k
//     q, k <- RoPE(q, k) at the tokens' position ids           in place (ops/rope.h); Gemma 3's
//                                                              sliding layers use their own base
//     ctx = attention(q, k, v): causal, GQA, the layer's sliding window, scale 1/sqrt(D) (Gemma:
//           query_pre_attn_scalar^-1/2), Gemma 2's logit soft-cap
//     x1  = x_l + ctx Wo^T (+ bias)                            Gemma: x_l + RMSNorm(ctx Wo^T)
//                                                              (attn_out, rstd_ao saved)
//     h2  = RMSNorm(x1) w_post                                 rstd2 saved
//     gu  = h2 [Wgate; Wup]^T (+ biases)                       (N, 2F), one GEMM
//     m   = act(gate) * up                                     (N, F) (ops/glu.h)
//     x_{l+1} = x1 + m Wdown^T (+ bias)                        Gemma: x1 + RMSNorm(m Wdown^T)
//                                                              (mlp_out, rstd_mo saved)
//   hidden = RMSNorm(x_L) w_norm                               (N, C): HF's last_hidden_state
//   pooled = hidden at each row's last non-pad token           (B, C) (ops/last_token.h)
//   logits = pooled score^T                                    (B, K), no bias
// A causal LM (c.causal_lm) stops at hidden: its logits hidden lm_head^T are never formed here
// (the caller's fused loss, ops/lm_head_loss.h).
// Adapters (LoRA / DoRA, models/adapter_site.h) sit on q, k, v, o, gate, up and down: on the
// column block of the fused GEMM's output for q / k / v and gate / up. Padded batches mask padding
// keys; packed batches run the attention op's varlen form.
//
// Mixed precision (BackboneShape::compute bf16 / f16, autocast semantics as the encoder's,
// models/bert/encoder.h): the GEMMs read the 16-bit shadow of the layers' weights (DecoderWeights::
// shadow; with frozen 16-bit weights the only copy) and 16-bit inputs, and write 16-bit qkv, ctx,
// gu, m, the sublayer outputs and the gradients of these; attention runs on 16-bit q, k, v with
// fp32 softmax and probabilities. The residual stream (x0, x1, out), every RMSNorm (statistics and
// output, then rounded once into its 16-bit GEMM input h1 / h2), RoPE and the q / k norms (on fp32
// copies of the 16-bit projections, rounded once into qkv), the gate activation (fp32 on a copy of
// gu, m rounded once), the final norm, last-token pooling, the score head and the loss stay fp32.
// Parameter gradients are fp32. LoRA / DoRA branches compute in fp32 (models/adapter_site.h).
//
// Gradient checkpointing: only each layer's output is kept per layer; the other activations of
// all layers share one slot, and backward recomputes a layer's forward into it before its
// backward (dropout masks come from Philox keys: the same bits, bit-identical gradients).
#pragma once

#include <array>
#include <vector>

#include "core/buffer_table.h"
#include "models/backbone.h"
#include "models/layers/adapter_buffers.h"
#include "models/decoder/decoder_config.h"
#include "ops/attention.h"

namespace ftune {

// The adaptable linear modules of a layer, in PEFT's naming order (the kinds of the sites).
enum class DecoderSite { Q, K, V, O, Gate, Up, Down };
constexpr int kDecoderSites = 7;
const char* decoder_site_suffix(DecoderSite site);  // "self_attn.q_proj", ...
std::vector<AdapterSite> decoder_adapter_sites(const DecoderConfig& c);
// named_modules() of the *ForSequenceClassification with `layers` layers (q_norm / k_norm when
// `qk_norm`, Gemma's pre- / post-feedforward norms when `sandwich_norms`).
// The modules under `prefix` (DecoderConfig::prefix: "model." or "model.language_model.").
// A causal LM's head module is lm_head instead of score.
std::vector<ClassifierModule> decoder_modules(int64_t layers, bool qk_norm, bool sandwich_norms,
                                              const std::string& prefix = "model.",
                                              bool causal_lm = false);

struct DecoderLayerWeights {
  TensorView qkv_w, qkv_b;    // (Hq D + 2 Hkv D, C), its bias or undefined
  TensorView o_w, o_b;        // (C, Hq D), (C)
  TensorView gu_w, gu_b;      // (2F, C): gate_proj then up_proj
  TensorView down_w, down_b;  // (C, F)
  TensorView in_norm, post_norm;  // (C): before attention, before the MLP
  TensorView attn_out_norm, mlp_out_norm;  // (C): Gemma's on the attention / MLP outputs
  TensorView q_norm, k_norm;      // (D): Qwen3
};

struct DecoderWeights {
  TensorView embed, final_norm, score;  // (V, C), (C), (K, C)
  std::vector<DecoderLayerWeights> layers;
  AdapterSet adapters;  // empty without adapters (in a gradient view: their gradients)
  // Mixed precision: the layers' weights in the compute type (the GEMM matrices and biases are
  // read); empty in fp32.
  std::vector<DecoderLayerWeights> shadow;
};

void add_decoder_params(const DecoderConfig& c, ParamTable& table);
DecoderWeights bind_decoder_weights(const DecoderConfig& c, const ParamViews& p);
// The layers' parameters: one contiguous range of the table (first element, length).
std::pair<int64_t, int64_t> decoder_layer_range(const DecoderConfig& c, const ParamTable& table);
// HF's _init_weights of the family (normal(0, initializer_range) weights, the padding row 0,
// norms at 1, biases 0), seeded.
void init_decoder_param(const DecoderConfig& c, const ParamSpec& spec, TensorView dst,
                        std::mt19937_64& rng);

struct DecoderLayerActs {
  TensorView h1, rstd1, qkv, probs, ctx, x1, rstd2, h2, gu, m, out;
  TensorView qkv_raw, rstd_q, rstd_k;  // q/k norms: the projections before them; else qkv_raw = qkv
  TensorView attn_out, rstd_ao, mlp_out, rstd_mo;  // Gemma: the branch outputs before their norms
  std::array<AdapterSiteBuffers, kDecoderSites> adapter;  // models/layers/adapter_buffers.h
};

struct DecoderActs {
  TensorView x0, final_rstd, hidden, pool_index, pooled, logits, tmp;
  std::vector<DecoderLayerActs> layers;
  TensorView dx, dtmp, dh, dctx, dqkv, dgu, dm, dpooled;  // gradients, shared by the layers
  TensorView inv_freq;   // (rotary_dim / 2) on the device, written when the model binds
  TensorView inv_freq_local;  // Gemma 3's sliding layers' (undefined for one RoPE)
  TensorView inv_freq_long;   // longrope's long factors (undefined for other types)
  TensorView workspace;
  // The adapters' shared scratch: h, adapter dropout's and the fp32 copies of 16-bit x, y and dx.
  AdapterScratch adapter_scratch;
  // Mixed precision: fp32 staging shared by the layers (the norms' outputs, q / k for RoPE and the
  // q / k norms, gu and m for the gate) and the 16-bit copy of dx a GEMM's backward reads.
  TensorView stage0, stage1, dy_h;
  DType compute = DType::F32;
  bool checkpointing = false;
};

// The buffers of `shape`, bound to `acts` (sized here).
void decoder_buffers(const DecoderConfig& c, const BackboneShape& shape, DecoderActs& acts,
                     BufferTable& table);
AttentionSpec decoder_attention_spec(const DecoderConfig& c, int64_t layer);

// Logits (B, K) of the batch; a causal LM (c.causal_lm): the final hidden states (N, C), the LM
// head and its loss being the caller's (ops/lm_head_loss.h).
TensorView decoder_forward(const DecoderConfig& c, const DecoderWeights& w, DecoderActs& a,
                           const TokenInputs& in, const DropoutPlan& d);
// dlogits (B, K) -> gradients in `g` (undefined views are frozen); a causal LM: dlogits is the
// gradient of the final hidden states (N, C).
void decoder_backward(const DecoderConfig& c, const DecoderWeights& w, const DecoderWeights& g,
                      DecoderActs& a, TensorView dlogits, const TokenInputs& in,
                      const DropoutPlan& d);

}  // namespace ftune
