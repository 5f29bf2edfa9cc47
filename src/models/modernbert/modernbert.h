// The ModernBERT stack and head of ModernBertForSequenceClassification
// (models/modernbert/modernbert_config.h)
// with explicit forward and backward passes over planned buffers. Gradient rule: parameter
// gradients accumulate (+=), activation gradients overwrite (=).
//
//   e     = tok_embeddings[ids]                                (N, C), no position embeddings
//   x_0   = dropout_emb(LayerNorm(e))                          embeddings.norm (bias: norm_bias)
//   layer l (pre-norm):
//     h1  = l == 0 ? x_0 : LayerNorm(x_l)                      attn_norm (Identity on layer 0)
//     qkv = h1 Wqkv^T (+ bias)                                 (N, 3C): q | k | v, heads of D
//     q, k <- RoPE at the tokens' position ids                 global_rope (full-attention layers)
//                                                              or local_rope (sliding layers)
//     ctx = attention(q, k, v): bidirectional; sliding layers see |i - j| <= local_attention / 2;
//           padding keys masked (padded) or varlen rows (packed); dropout_attn on P
//     x1  = x_l + dropout_attn(ctx Wo^T (+ bias))              attn.Wo, out_drop
//     h2  = LayerNorm(x1)                                      mlp_norm
//     gu  = h2 Wi^T (+ bias)                                   (N, 2F): input | gate (HF's chunk)
//     m   = dropout_mlp(act(input) * gate)                     (N, F), GeGLU (ops/glu.h)
//     x_{l+1} = x1 + m Wo^T (+ bias)                           mlp.Wo
//   hidden = LayerNorm(x_L)                                    final_norm: HF's last_hidden_state
//   pooled = hidden of each row's first token (cls) or the mean of its real tokens (mean)
//   p      = LayerNorm(act(pooled dense^T (+ bias)))           head.dense (classifier_bias),
//                                                              classifier_activation, head.norm
//   logits = dropout_cls(p) classifier^T + bias                (B, K)
// Adapters (LoRA / DoRA, models/adapter_site.h) sit on Wqkv, attn.Wo, Wi and mlp.Wo of every layer
// and on head.dense (a site past the last layer, as BERT's pooler). Packed batches run the
// attention op's varlen form. Gradient checkpointing keeps the layer outputs and recomputes each
// layer's activations (the same dropout masks) before its backward.
//
// Mixed precision (BackboneShape::compute bf16 / f16, autocast semantics as the encoder's,
// models/bert/encoder.h): the GEMMs read the 16-bit shadow of the layers' weights
// (ModernBertWeights::shadow; with frozen 16-bit weights the only copy) and 16-bit inputs, and
// write 16-bit qkv, ctx,
// gu, m, the sublayer outputs and the gradients of these; attention runs on 16-bit q, k, v with
// fp32 softmax and probabilities. The residual stream (x0, x1, out), every LayerNorm (statistics
// and output, the latter rounded once into its 16-bit GEMM input h1 / h2), RoPE (on fp32 copies
// of q and k, rounded once), GeGLU (fp32 math on the 16-bit gu, m rounded once), the final norm, the
// pooling, the head and the loss stay fp32. Parameter gradients are fp32; LoRA / DoRA branches
// compute in fp32 (models/adapter_site.h).
#pragma once

#include <array>
#include <vector>

#include "core/buffer_table.h"
#include "models/backbone.h"
#include "models/layers/adapter_buffers.h"
#include "models/modernbert/modernbert_config.h"
#include "ops/attention.h"

namespace ftune {

// The adaptable linear modules of a layer (the kinds of its adapter sites); head.dense is kind 0
// of layer num_layers.
enum class ModernBertSite { Wqkv, AttnWo, Wi, MlpWo };
constexpr int kModernBertSites = 4;
const char* modernbert_site_suffix(ModernBertSite site);  // "attn.Wqkv", ...
std::vector<AdapterSite> modernbert_adapter_sites(const ModernBertConfig& c);
// named_modules() of ModernBertForSequenceClassification with `layers` layers.
std::vector<ClassifierModule> modernbert_modules(int64_t layers);

struct ModernBertLayerWeights {
  TensorView attn_norm_w, attn_norm_b;  // (C); undefined on layer 0 (Identity)
  TensorView qkv_w, qkv_b;              // (3C, C), (3C) or undefined
  TensorView o_w, o_b;                  // (C, C), (C)
  TensorView mlp_norm_w, mlp_norm_b;    // (C)
  TensorView wi_w, wi_b;                // (2F, C), (2F)
  TensorView wo_w, wo_b;                // (C, F), (C)
};

struct ModernBertWeights {
  TensorView embed, emb_norm_w, emb_norm_b;  // (V, C), (C), (C)
  std::vector<ModernBertLayerWeights> layers;
  TensorView final_norm_w, final_norm_b;     // (C)
  TensorView dense_w, dense_b, head_norm_w, head_norm_b;  // (C, C), (C), (C), (C)
  TensorView cls_w, cls_b;                   // (K, C), (K)
  AdapterSet adapters;  // empty without adapters (in a gradient view: their gradients)
  // Mixed precision: the layers' weights in the compute type (the GEMM matrices are read); empty
  // in fp32.
  std::vector<ModernBertLayerWeights> shadow;
};

void add_modernbert_params(const ModernBertConfig& c, ParamTable& table);
ModernBertWeights bind_modernbert_weights(const ModernBertConfig& c, const ParamViews& p);
// The layers' parameters: one contiguous range of the table (first element, length).
std::pair<int64_t, int64_t> modernbert_layer_range(const ModernBertConfig& c, const ParamTable& table);
// HF's _init_weights of the family (truncated normals, seeded; norms at 1, biases 0).
void init_modernbert_param(const ModernBertConfig& c, const ParamSpec& spec, TensorView dst,
                           std::mt19937_64& rng);

struct ModernBertLayerActs {
  TensorView x1, mean1, rstd1, h1, qkv, probs, ctx, mean2, rstd2, h2, gu, m, out;
  std::array<AdapterSiteBuffers, kModernBertSites> adapter;  // models/layers/adapter_buffers.h
};

struct ModernBertActs {
  TensorView emb, emb_mean, emb_rstd, x0;  // (N, C), (N), (N), (N, C)
  std::vector<ModernBertLayerActs> layers;
  TensorView final_mean, final_rstd, hidden, tmp;
  // The head: pooled, z = dense output, g = act(z), p = norm(g), p_drop (B, C); logits (B, K).
  TensorView pooled, z, g, head_mean, head_rstd, p, p_drop, logits;
  AdapterSiteBuffers head_adapter;  // head.dense's adapter: u (B, r), DoRA's z (B, C)
  TensorView dx, dtmp, dh, dctx, dqkv, dgu, dm, db1, db2;  // gradients, shared by the layers
  TensorView global_inv_freq, local_inv_freq;              // (D / 2) each, written at bind
  TensorView workspace;
  // The adapters' shared scratch: h, adapter dropout's and the fp32 copies of 16-bit x, y and dx.
  AdapterScratch adapter_scratch;
  // Mixed precision: fp32 staging shared by the layers (the norms' outputs, q / k for RoPE) and
  // the 16-bit copy of dx the output GEMMs' backward reads.
  TensorView stage0, dy_h;
  DType compute = DType::F32;
  bool recompute = false;  // gradient checkpointing: one slot, layers recomputed in backward
};

void modernbert_buffers(const ModernBertConfig& c, const BackboneShape& shape, ModernBertActs& acts,
                        BufferTable& table);
AttentionSpec modernbert_attention_spec(const ModernBertConfig& c, int64_t layer);

// Logits (B, K) of the batch.
TensorView modernbert_forward(const ModernBertConfig& c, const ModernBertWeights& w,
                              ModernBertActs& a, const TokenInputs& in, const DropoutPlan& d);
// dlogits (B, K) -> gradients in `g` (undefined views are frozen).
void modernbert_backward(const ModernBertConfig& c, const ModernBertWeights& w,
                         const ModernBertWeights& g, ModernBertActs& a, TensorView dlogits,
                         const TokenInputs& in, const DropoutPlan& d);

// The head on the pooled rows (models/modernbert/modernbert_head.cc): p_drop -> logits, and back to
// dpooled.
TensorView modernbert_head_forward(const ModernBertConfig& c, const ModernBertWeights& w,
                                   ModernBertActs& a, const TokenInputs& in, const DropoutPlan& d);
void modernbert_head_backward(const ModernBertConfig& c, const ModernBertWeights& w,
                              const ModernBertWeights& g, ModernBertActs& a, TensorView dlogits,
                              const TokenInputs& in, const DropoutPlan& d);

// Philox sites of the family's dropouts (adapter dropout has its own, models/adapters.h).
inline uint32_t modernbert_probs_site(int64_t layer) { return static_cast<uint32_t>(1 + layer); }
inline uint32_t modernbert_attn_out_site(int64_t layer) { return static_cast<uint32_t>(0x4000 + layer); }
inline uint32_t modernbert_mlp_site(int64_t layer) { return static_cast<uint32_t>(0x8000 + layer); }
inline uint32_t modernbert_embedding_site() { return 0xC000; }
inline uint32_t modernbert_classifier_site() { return 0x10001; }  // as the encoder heads' pooled dropout

}  // namespace ftune
