// Multi-head attention core (between the Q/K/V projections and the output projection) for every
// model family ftune trains: BERT-style encoders, ModernBERT, Llama/Qwen/Mistral/Gemma decoders.
//
//   s_ij = scale * (q_i . k_j)                               query head h, key/value head h / (Hq/Hkv)
//   s_ij = softcap * tanh(s_ij / softcap)                    when softcap > 0 (Gemma 2), before masking
//   P_i  = softmax over the keys j visible from query i      (the others get probability 0)
//   out_i = sum_j dropout(P)_ij v_j
//
// Visibility. Positions are counted from 0 within each sequence; query i sees key j when
//   j < len (same sequence), key_mask[j] != 0 (when a key mask is given),
//   j <= i (causal), i - j <= window.left (when >= 0), j - i <= window.right (when >= 0).
// A query that sees no key at all attends uniformly to every key of its sequence: what HF's eager
// attention computes with its additive finfo.min mask (the row is all equal); its backward is the
// softmax's (dS = P (dP - rowsum(P dP))), as HF's autograd gives. Such rows arise only with a key
// mask (BERT's all-padding rows, left-padded causal batches); without one a query sees itself.
//
// Window, unambiguously: window.left / window.right are the largest distances |i - j| allowed on
// each side, in positions, bounds included; -1 is unbounded. HF's config keys map to it by:
//   hf_sliding_window(W)  (Mistral, Qwen2, Gemma 2/3 `sliding_window`; transformers' masking_utils
//                          keeps kv_idx > q_idx - W): {left = W - 1, right = -1}, with causal
//   hf_bidirectional_sliding_window(W) (Gemma 3 with use_bidirectional_attention, sliding
//                          layers, W as config.json holds it: transformers keeps W // 2 + 1 in
//                          memory and |i - j| < W // 2 + 1): {W / 2, W / 2}, bidirectional
//   hf_local_attention(W) (ModernBERT `local_attention`: |i - j| <= W // 2): {W / 2, W / 2}
//
// Layouts (N tokens in the call; C_q = Hq * D, C_kv = Hkv * D):
//   q, dq      (N, C_q)   any row stride, contiguous rows: head h in columns [h D, (h + 1) D)
//   k, v, dk, dv (N, C_kv) likewise (strided views into a fused projection output need no copy)
//   out, dout  (N, C_q)   likewise
//   rows.cu_seqlens (B + 1) i32 on the op's device: sequence b is tokens [cu[b], cu[b + 1]), no
//              padding (varlen, packed batches), each at most rows.max_seq long, cu[B] = N;
//              undefined: the padded layout, sequence b is tokens [b T, (b + 1) T), T = max_seq
//   rows.key_mask (N) i32 (a (B, T) mask is fine): 1 = real token, 0 = padding (never attended)
//   saved      f32, kept from the forward pass for the backward pass: ftune's kernel writes the
//              probabilities P (before dropout) of sequence b, head h, query i at row
//                (start_b Hq + h len_b + i) of a row-major (N Hq, T) matrix (columns >= len_b 0),
//              i.e. (B, Hq, T, T) in the padded layout; cuDNN its softmax statistics
//              (ops/attention_cudnn.h). attention_buffers() sizes it.
// Gradients: dq, dk, dv are overwritten (activation gradients, =); with GQA dk and dv sum over the
// Hq / Hkv query heads of a group, in a fixed order (deterministic, no float atomics).
//
// Dropout on the probabilities: element (b, h, i, j) is kept when
//   Philox(rng, e) >= p,   e = (((row0 + b) * Hq + h) * Tv + i) * Tv + j
// (row0 = place.row0: the call's first sequence's place in the optimizer step's batch; Tv =
// place.stream_seq, or T when 0; ops/dropout.h), so a sequence draws the same masks whichever
// micro-batch carries it, padded or packed. The backward pass regenerates them. With row0 = 0 and
// Tv = T in the padded layout, e is the flat index of (b, h, i, j).
//
// Kernels (the run's choice, AttentionCall::kernel, one value for the run: no process global):
//   Ftune: ftune's own kernels, on the CPU (BLAS, ops/attention_cpu.cc) and CUDA
//          (ops/attention_cuda.cu; fp32/bf16/f16 storage, fp32 math, deterministic); the same
//          results to fp32 rounding and the same dropout masks.
//   Cudnn: cuDNN's fused flash attention for 16-bit storage on a GPU where it supports the call
//          (ops/attention_cudnn.h: its own dropout masks, `saved` holds its statistics); a call it
//          refuses runs ftune's kernel when `saved` holds the probabilities, else ShapeError.
//
// Mixed precision (autocast): q, k, v, out, dout, dq, dk, dv share one storage type (f32, bf16 or
// f16); scores, softmax and probabilities are fp32 and every product accumulates in fp32 (the CPU
// stages 16-bit tensors through fp32, ops/cast.h).
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "ops/dropout.h"

namespace ftune {

// The keys a query may see by distance, bounds included; -1: unbounded on that side.
struct AttentionWindow {
  int64_t left = -1;   // keys j with i - j <= left
  int64_t right = -1;  // keys j with j - i <= right
};

// HF's `sliding_window` (Mistral, Qwen2, Gemma 2 and 3): the query and the W - 1 keys before it.
AttentionWindow hf_sliding_window(int64_t sliding_window);
// Gemma 3's config.json `sliding_window` with use_bidirectional_attention: |i - j| <= W // 2.
AttentionWindow hf_bidirectional_sliding_window(int64_t sliding_window);
// ModernBERT's `local_attention`: keys within W // 2 positions on either side.
AttentionWindow hf_local_attention(int64_t local_attention);

// What a model family decides about its attention.
struct AttentionSpec {
  int64_t heads = 0;     // Hq, query heads
  int64_t kv_heads = 0;  // Hkv, key/value heads; divides Hq (Hkv = Hq: MHA, 1: MQA, else GQA)
  int64_t head_dim = 0;  // D, independent of the hidden size
  bool causal = false;
  AttentionWindow window;
  float scale = 0;    // multiplies q . k: default_attention_scale(D), or Gemma's
                      // query_pre_attn_scalar^-1/2; must be set (> 0)
  float softcap = 0;  // > 0: logit soft-cap (Gemma 2's attn_logit_softcapping); 0: off
};

// 1 / sqrt(D), computed as every kernel of ftune computed it before the scale was a parameter.
float default_attention_scale(int64_t head_dim);

// The kernel that runs attention; one value for a run (training.attention), passed with each call.
enum class AttentionKernel : uint8_t { Ftune, Cudnn };
const char* attention_kernel_name(AttentionKernel kernel);  // "ftune", "cudnn"

// Where the call's sequences sit among its N tokens (see the layouts above).
struct AttentionRows {
  int64_t batch = 0;      // B sequences
  int64_t max_seq = 0;    // T: the padded length, or (varlen) at least the longest sequence
  TensorView cu_seqlens;  // (B + 1) i32: varlen; undefined: padded rows of T tokens
  TensorView key_mask;    // (N) i32: 1 real, 0 padding; undefined: every key is real
};

// One attention call: everything but the tensors.
struct AttentionCall {
  AttentionSpec spec;
  AttentionRows rows;
  float dropout_p = 0;    // on the probabilities, in [0, 1)
  RngKey rng;             // the site's key (core/philox.h)
  DropoutRows place;      // row0 and stream_seq (Tv) of the dropout streams; `seq` is not read
  AttentionKernel kernel = AttentionKernel::Ftune;
  TensorView workspace;   // f32 scratch on the op's device, attention_buffers().workspace floats
};

// out (N, Hq D) = attention(q, k, v); saved: see above.
void attention_forward(const AttentionCall& call, TensorView out, TensorView saved, TensorView q,
                       TensorView k, TensorView v);
// dq, dk, dv (overwritten) from dout; out: the forward pass's output (cuDNN's backward reads it;
// ftune's kernel does not, and it may be undefined then).
void attention_backward(const AttentionCall& call, TensorView dq, TensorView dk, TensorView dv,
                        TensorView dout, TensorView q, TensorView k, TensorView v, TensorView out,
                        TensorView saved);

// What the memory planner reserves for attention calls of up to `sequences` sequences, `tokens`
// tokens and `max_seq` tokens per sequence (padded: tokens = sequences * max_seq), in floats:
//   saved      per call site (layer), from forward to backward: ftune's probabilities,
//              tokens * Hq * max_seq (B Hq T^2 padded), or cuDNN's statistics where `cudnn`
//   workspace  shared scratch: on the CPU per-thread scores (compute_threads() x (2 T^2 + T));
//              on CUDA the backward pass's row sums, sequences * Hq * T (0 for forward only),
//              plus cuDNN's workspace where `cudnn`
// `cudnn`: the run's kernel is cuDNN and it applies (uses_cudnn_attention, ops/attention_cudnn.h).
struct AttentionBuffers {
  int64_t saved = 0;
  int64_t workspace = 0;
};
// `token_positions`: the most (tokens x longest row) of any batch, which the saved probabilities
// hold (each token a row of its sequence's length); 0: tokens x max_seq (a planner that knows its
// batches passes less when its most tokens and its longest row are not in the same batch).
AttentionBuffers attention_buffers(const AttentionSpec& spec, Device device, bool cudnn,
                                   int64_t sequences, int64_t tokens, int64_t max_seq,
                                   bool backward, int64_t token_positions = 0);

// The fused-QKV entry point of BERT-style encoders (today's callers): qkv (B, T, 3C) with equal
// heads, C = H * D, scale 1/sqrt(D), bidirectional, padded with a key mask (B, T); out (B, T, C),
// dqkv (B, T, 3C) overwritten. A thin wrapper over the op above (q, k, v are column views of qkv).
// probs: (B, H, T, T), or a flat f32 buffer planned for cuDNN's state, which makes the call's
// kernel cuDNN (ops/attention_cudnn.h). dropout rows: as `place` above.
void attention_forward(TensorView out, TensorView probs, TensorView qkv, TensorView key_mask,
                       int num_heads, float dropout_p, RngKey rng, TensorView workspace,
                       const DropoutRows& rows = {});
void attention_backward(TensorView dqkv, TensorView dout, TensorView qkv, TensorView probs,
                        TensorView key_mask, int num_heads, float dropout_p, RngKey rng,
                        TensorView workspace, const DropoutRows& rows = {},
                        TensorView out = {});
// The CPU kernel's scratch for sequences of up to T tokens: compute_threads() x (2T^2 + T).
int64_t attention_workspace(int64_t T, int64_t D);
// attention_buffers(...).workspace of (B, H, T) padded, equal heads, ftune's kernel.
int64_t attention_workspace(Device device, int64_t B, int64_t H, int64_t T, int64_t D,
                            bool backward);

// The resolved call as the kernels see it: plain values and pointers (host pointers for the CPU
// kernels, device pointers for the CUDA ones), trivially copyable into a CUDA kernel.
struct AttentionArgs {
  AttentionSpec spec;
  int64_t B = 0, T = 0;                  // sequences; padded length or longest sequence
  const int32_t* cu_seqlens = nullptr;   // (B + 1); null: padded
  const int32_t* key_mask = nullptr;     // (N); null: every key real
  int64_t ldq = 0, ldk = 0, ldv = 0, ldo = 0;      // row strides of q, k, v, out / dout
  int64_t lddq = 0, lddk = 0, lddv = 0;            // row strides of dq, dk, dv
  float dropout_p = 0;
  RngKey rng;
  uint64_t row0 = 0;  // dropout streams (see above); resolved from rng.micro by the kernels
  int64_t Tv = 0;     // >= T

  // Sequence b: its first token and its length (cu_seqlens is read on the kernels' side).
  FTUNE_HD int64_t start(int64_t b) const { return cu_seqlens ? cu_seqlens[b] : b * T; }
  FTUNE_HD int64_t length(int64_t b) const {
    return cu_seqlens ? cu_seqlens[b + 1] - cu_seqlens[b] : T;
  }
  FTUNE_HD int64_t group() const { return spec.heads / spec.kv_heads; }  // query heads per kv head
  // Row of the saved probabilities of (b, h, i); the row has T floats.
  FTUNE_HD int64_t probs_row(int64_t start_b, int64_t len_b, int64_t h, int64_t i) const {
    return start_b * spec.heads + h * len_b + i;
  }
  // Dropout stream index of probability (b, h, i, 0).
  FTUNE_HD uint64_t stream_row(uint64_t row0_resolved, int64_t b, int64_t h, int64_t i) const {
    const uint64_t tv = static_cast<uint64_t>(Tv);
    return (((row0_resolved + static_cast<uint64_t>(b)) * static_cast<uint64_t>(spec.heads) +
             static_cast<uint64_t>(h)) * tv + static_cast<uint64_t>(i)) * tv;
  }
  // Keys [lo, hi) that query i of a sequence of len tokens sees by position (causal, window);
  // the key mask then hides padding keys among them.
  FTUNE_HD void key_range(int64_t i, int64_t len, int64_t* lo, int64_t* hi) const {
    int64_t a = 0, z = len;
    if (spec.causal && z > i + 1) z = i + 1;
    if (spec.window.left >= 0 && a < i - spec.window.left) a = i - spec.window.left;
    if (spec.window.right >= 0 && z > i + spec.window.right + 1) z = i + spec.window.right + 1;
    *lo = a;
    *hi = z > a ? z : a;
  }
  // Queries [lo, hi) that see key j by position (the transpose of key_range).
  FTUNE_HD void query_range(int64_t j, int64_t len, int64_t* lo, int64_t* hi) const {
    int64_t a = 0, z = len;
    if (spec.causal && a < j) a = j;
    if (spec.window.left >= 0 && z > j + spec.window.left + 1) z = j + spec.window.left + 1;
    if (spec.window.right >= 0 && a < j - spec.window.right) a = j - spec.window.right;
    *lo = a;
    *hi = z > a ? z : a;
  }
};

namespace cpu {
// probs: the saved probabilities (layout above); workspace: attention_workspace(T, D) floats.
void attention_forward(const AttentionArgs& a, float* out, float* probs, const float* q,
                       const float* k, const float* v, float* workspace);
void attention_backward(const AttentionArgs& a, float* dq, float* dk, float* dv, const float* dout,
                        const float* q, const float* k, const float* v, const float* probs,
                        float* workspace);
int64_t attention_workspace_per_thread(int64_t T);
}  // namespace cpu

namespace cuda {
// The same contract, for storage type `dtype` (f32, bf16, f16) of q, k, v, out, dout, dq, dk, dv
// (probs f32). The backward pass keeps its row sums in the workspace (workspace_floats >= Hq T:
// it walks the sequences in chunks of floor(workspace_floats / (Hq T))).
void attention_forward(const AttentionArgs& a, DType dtype, void* out, float* probs,
                       const void* q, const void* k, const void* v);
void attention_backward(const AttentionArgs& a, DType dtype, void* dq, void* dk, void* dv,
                        const void* dout, const void* q, const void* k, const void* v,
                        const float* probs, float* workspace, int64_t workspace_floats);
}  // namespace cuda

}  // namespace ftune
