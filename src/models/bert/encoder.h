// The BERT / RoBERTa / XLM-R encoder: embeddings and transformer layers with explicit forward and
// backward passes over planned buffers.
//
// Gradient rule: parameter gradients accumulate (+=) into the flat gradient buffer, so gradient
// accumulation over micro-batches costs nothing; activation gradients overwrite (=).
//
// One layer (post-LayerNorm, as BERT):
//   qkv   = x W_qkv^T + b_qkv                  (N, 3C)  [query | key | value] rows fused
//   ctx   = attention(qkv, key mask)           (N, C)   probs (B, H, T, T) saved (with cuDNN's
//                                                       flash attention only its softmax stats)
//   a     = dropout(ctx W_o^T + b_o)           (N, C)
//   h1    = LayerNorm(a + x)                   (N, C)   sum1 = a + x saved
//   f     = dropout(gelu(h1 W_1^T + b_1) W_2^T + b_2)
//   out   = LayerNorm(f + h1)                  (N, C)   sum2 saved
// Embeddings: LayerNorm(word[ids] + type[type_ids] + position[pos_ids]), then dropout.
//
// Adapters (models/adapters.h, ops/lora.h): each targeted linear's frozen result gets the LoRA
// (or DoRA) branch added right after its GEMM; for the fused QKV matrix, on the query / key /
// value column block alone. With adapters the base weights are frozen: their gradient views are
// undefined and their gradient GEMMs are skipped; with frozen embeddings the backward pass stops
// at layer 0 (no input gradient is formed there).
//
// Mixed precision (autocast semantics, EncoderTraining::compute bf16 or f16): the GEMMs read a
// 16-bit shadow of the layers' weights (EncoderWeights::shadow, rewritten from the fp32 master
// after every optimizer step) and 16-bit inputs, and write 16-bit qkv, ctx, attn, ffn_pre, ffn_act,
// ffn_out and the gradients of these; attention's softmax and probs, the residual stream (sum1,
// sum2), every LayerNorm and its output stay fp32, with a 16-bit copy of each LayerNorm output
// that feeds a GEMM (ln1_h, out_h, the embeddings' emb_out_h). Parameter gradients are fp32,
// accumulated from the 16-bit products in fp32. Biases and LayerNorm weights are read from the
// fp32 master. A LoRA branch computes in fp32 from its fp32 weights on fp32 copies of its 16-bit
// input and output (rounded once when added back). DoRA likewise: the frozen GEMM in 16 bits
// into the fp32 z (the fused QKV block widened, less its bias), the LoRA branch, the weight norms
// and the magnitude scaling in fp32 (y rounded once); in backward its magnitude gradient and
// dy *= m / n in fp32 on a copy of the 16-bit dy. With adapter dropout, DoRA's second frozen GEMM
// (on the dropped-out input, models/adapter_site.h) runs in fp32 on the fp32 master weight.
//
// Packed batches (TokenInputs with cu_seqlens; data/token_batch.h): every op but attention works
// on the N tokens as they are; attention runs row by row over the padded kernel (a row of L real
// tokens is a batch of one row with nothing padded), each row's probabilities (H, L, L) after the
// previous row's in the layer's buffer, and dropout draws each row's masks from its place in the
// step batch (ops/dropout.h), so a packed batch computes what the padded one does on its real
// tokens. (CPU only until the attention op's varlen form runs this loop on CUDA.)
//
// First-token form (BackboneShape::first_token_head; models/layers/first_token_rows.h): the head
// reads only each row's first token, so the last layer runs QKV and attention over every token and
// the rest (attention output, both LayerNorms, the FFN) for the B first tokens alone; the encoder
// returns (B, 1, C). For MiniLM-L6 this skips about 1/8 of the step's linear FLOPs, for BERT-base
// about 1/16.
//
// Gradient checkpointing: only each layer's output (= the next layer's input) is kept; the other
// activations of all layers share one slot, and backward recomputes a layer's forward into it
// before its backward. Dropout masks come from Philox keys, so the recomputation is bit-identical
// and so are the gradients.
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "core/buffer_table.h"
#include "models/backbone.h"
#include "models/bert/encoder_config.h"
#include "models/layers/adapter_buffers.h"
#include "ops/attention.h"

namespace ftune {

// The adaptable linear layers of one encoder layer, in PEFT's naming order (the kinds of the BERT
// family's adapter sites).
enum class EncoderSite { Query, Key, Value, AttnOut, FfnIn, FfnOut };
constexpr int kEncoderSites = 6;
const char* encoder_site_suffix(EncoderSite site);  // "attention.self.query", ...
// Every adaptable module of the encoder, layer by layer (models/backbone.h AdapterSite).
std::vector<AdapterSite> encoder_adapter_sites(const EncoderConfig& config);

// Views of the encoder's parameters (or of their gradients: same layout in the gradient buffer).
struct LayerWeights {
  TensorView qkv_w, qkv_b;            // (3C, C), (3C): query, key, value stacked
  TensorView attn_out_w, attn_out_b;  // (C, C), (C)
  TensorView ln1_w, ln1_b;            // (C)
  TensorView ffn_in_w, ffn_in_b;      // (F, C), (F)
  TensorView ffn_out_w, ffn_out_b;    // (C, F), (C)
  TensorView ln2_w, ln2_b;            // (C)
};

struct EncoderWeights {
  TensorView word, position, token_type;  // (V, C), (P, C), (TV, C)
  TensorView emb_ln_w, emb_ln_b;          // (C)
  std::vector<LayerWeights> layers;
  AdapterSet adapters;  // empty without adapters (in a gradient view: their gradients)
  // Mixed precision: the layers' weights in the compute type (only the GEMM matrices are read);
  // empty in fp32.
  std::vector<LayerWeights> shadow;
};
using EncoderAdapters = AdapterSet;

// Adds the encoder's parameters to `table` under their HF names (prefix "bert." / "roberta.").
void add_encoder_params(const EncoderConfig& config, ParamTable& table);
// Views of the encoder's parameters in `p` (values, gradients: a frozen one is undefined).
EncoderWeights bind_encoder_weights(const EncoderConfig& config, const ParamViews& p);
// The layers' parameters are one contiguous range of the parameter table: its first element
// and its length.
std::pair<int64_t, int64_t> encoder_layer_range(const EncoderConfig& config,
                                                const ParamTable& table);
// Views of the layers' parameters in `p` (any float type): the weight shadow of mixed precision.
std::vector<LayerWeights> bind_layer_weights(const EncoderConfig& config, const ParamViews& p);

// Activation buffers, planned for max_tokens tokens (padded: max_batch x max_seq). Training keeps
// every layer's activations for the backward pass; inference reuses two sets (ping-pong).
struct LayerActivations {
  TensorView qkv, probs, ctx, attn, sum1, ln1, ln1_mean, ln1_rstd;
  TensorView ffn_pre, ffn_act, ffn_out, sum2, out, ln2_mean, ln2_rstd;
  TensorView ln1_h, out_h;  // mixed precision: 16-bit copies of ln1 and out (GEMM inputs)
  // Per adapter site: u = x_d A^T (N, r) and, for DoRA, z = x W^T + s u B^T (N, out).
  std::array<AdapterSiteBuffers, kEncoderSites> adapter;
};

struct EncoderActivations {
  TensorView emb_sum, emb_mean, emb_rstd, emb_out;
  TensorView emb_out_h;  // mixed precision: 16-bit copy of emb_out
  std::vector<LayerActivations> layers;
  // Gradient buffers shared by all layers during backward.
  TensorView grad_out, grad_sum, grad_tmp, grad_ctx, grad_ffn, grad_qkv;
  TensorView workspace;
  // The adapters' shared scratch (models/layers/adapter_buffers.h): h (N, r), adapter dropout's
  // (N, max(C, F)) and, under mixed precision, the fp32 staging of the 16-bit x, y and dx.
  AdapterScratch adapter_scratch;
  bool checkpointing = false;
  DType compute = DType::F32;  // storage type of the GEMM activations (f32, bf16 or f16)
  // The layers' probs are flat buffers of cuDNN's state (ops/attention_cudnn.h), not (B, H, T, T).
  bool cudnn_attention = false;
  // First-token form (above): the last layer past attention runs for the first tokens alone;
  // first_ctx and first_x (max_rows, C) hold their attention output (compute type) and layer input
  // (fp32; in backward its gradient), first_dctx the attention output's gradient.
  bool first_token_last = false;
  TensorView first_ctx, first_x, first_dctx;
};

// How the encoder is trained (BackboneShape: checkpointing, adapters, compute, device, attention).
using EncoderTraining = BackboneShape;

// The encoder's activation buffers for `shape`, each bound to its view in `acts` (sized here).
// BERT's attention: equal heads, bidirectional, scale 1/sqrt(D), no window or soft-cap.
AttentionSpec encoder_attention_spec(const EncoderConfig& config);

void encoder_buffers(const EncoderConfig& config, const BackboneShape& shape,
                     EncoderActivations& acts, BufferTable& table);

// Runs the encoder; returns the last hidden state: (B, T, C) padded, (N, C) packed; in first-token
// form the first tokens' (B, 1, C).
TensorView encoder_forward(const EncoderConfig& config, const EncoderWeights& w,
                           EncoderActivations& acts, const TokenInputs& in,
                           const DropoutPlan& dropout);
// Backpropagates d_hidden (N, C) (first-token form: (B, C)), given in acts.grad_out, through the
// encoder into `grads` (undefined views in `grads` are frozen and get no gradient).
void encoder_backward(const EncoderConfig& config, const EncoderWeights& w,
                      const EncoderWeights& grads, EncoderActivations& acts,
                      const TokenInputs& in, const DropoutPlan& dropout);

// Philox sites of the encoder's dropouts.
inline uint32_t embedding_dropout_site() {
  return 0;
}
inline uint32_t attention_probs_site(int64_t layer) {
  return static_cast<uint32_t>(1 + 3 * layer);
}
inline uint32_t attention_output_site(int64_t layer) {
  return static_cast<uint32_t>(2 + 3 * layer);
}
inline uint32_t ffn_output_site(int64_t layer) {
  return static_cast<uint32_t>(3 + 3 * layer);
}

}  // namespace ftune
