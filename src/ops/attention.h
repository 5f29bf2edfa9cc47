// Multi-head self-attention core (the part between the QKV projection and the output projection),
// with a key padding mask and dropout on the attention probabilities, exactly as HF's eager BERT:
//   S = (Q K^T) * 1/sqrt(D);  S[:, j] = -inf where key j is padding;  P = softmax(S)
//   out = dropout(P) V
// Shapes (C = H * D):
//   qkv      (B, T, 3C)   per token [q | k | v]; head h uses columns [h*D, (h+1)*D) of each part
//   key_mask (B, T) i32   1 = real token, 0 = padding (never attended to)
//   probs    (B, H, T, T) softmax before dropout, saved for the backward pass; or a flat f32
//            buffer (rank 1) planned for cuDNN's state (ops/attention_cudnn.h): cuDNN runs the
//            call, and should it refuse, ftune's kernel runs on the buffer's first B*H*T*T floats
//            if it has them (else ShapeError)
//   out      (B, T, C)    context, head h in columns [h*D, (h+1)*D)
// The dropout mask of probs element (b, h, i, j) is Philox(rng, e) >= p with stream index
//   e = (((row0 + b) * H + h) * Tv + i) * Tv + j      (rows: ops/dropout.h; Tv = rows.stream_seq,
// or T when 0; rows.seq is not read: T is the tensor's), so a sequence's masks do not depend on
// the micro-batch carrying it or on its padding; backward regenerates them. With row0 = 0 and
// Tv = T, e is the flat index ((b*H + h)*T + i)*T + j. A row whose keys are all padding attends
// uniformly to every key, as HF's additive finfo.min mask does. Backward overwrites dqkv (B, T,
// 3C). workspace: f32 scratch on the tensors' device, at least attention_workspace_min(device, T,
// D) elements: on the CPU attention_workspace(T, D) (per-thread scores); on CUDA none for the
// forward pass and T for the backward pass, whose per-row sums r_i take T floats per (b, h) pair
// and which walks the B*H pairs in chunks of floor(workspace / T) (one chunk from B*H*T floats
// on; ops/attention_cuda.cu). CPU and CUDA give the same results to fp32 rounding
// (ops/attention_cuda.cu: one block per query or key row, no atomics).
// Mixed precision (autocast): qkv, out, dout and dqkv may be bf16 (or f16), all of one type; the
// scores, the softmax and probs stay fp32 and every product accumulates in fp32 (the CPU emulates
// this through fp32 staging, ops/cast.h). On CUDA, 16-bit attention runs through cuDNN's flash
// attention when the process chose it (training.attention: cudnn; ops/attention_cudnn.h), with
// its own dropout masks and the probs buffer holding its softmax statistics instead.
#pragma once

#include "core/philox.h"
#include "core/tensor.h"
#include "ops/dropout.h"

namespace ftune {

void attention_forward(TensorView out, TensorView probs, TensorView qkv, TensorView key_mask,
                       int num_heads, float dropout_p, RngKey rng, TensorView workspace,
                       const DropoutRows& rows = {});
// out: the forward pass's output, read only by cuDNN's kernel (ops/attention_cudnn.h).
void attention_backward(TensorView dqkv, TensorView dout, TensorView qkv, TensorView probs,
                        TensorView key_mask, int num_heads, float dropout_p, RngKey rng,
                        TensorView workspace, const DropoutRows& rows = {},
                        TensorView out = {});
// The CPU kernel's scratch: compute_threads() x (2T^2 + T) floats (threads x per-thread scores).
int64_t attention_workspace(int64_t T, int64_t D);
// What a planned run on `device` reserves for attention of up to (B, H, T, D), forward and
// (training) backward: the CPU kernel's attention_workspace(T, D); on CUDA the backward pass's
// row sums of every (b, h) pair, B*H*T floats (so it runs in one chunk), and none without it
// (the forward pass reads no workspace).
int64_t attention_workspace(Device device, int64_t B, int64_t H, int64_t T, int64_t D,
                            bool backward);
// The least workspace the kernels of `device` accept (the CUDA backward pass chunks below
// B*H*T): the CPU's attention_workspace(T, D); on CUDA T for the backward pass, 0 for forward.
int64_t attention_workspace_min(Device device, int64_t T, int64_t D, bool backward);

namespace cpu {
struct AttentionDims {
  int64_t B, T, H, D;
  uint64_t row0 = 0;  // dropout stream: first row in the step batch
  int64_t Tv = 0;     // dropout stream: positions per sequence (>= T)
};
void attention_forward(float* out, float* probs, const float* qkv, const int32_t* key_mask,
                       AttentionDims dims, float dropout_p, RngKey rng, float* workspace);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* probs,
                        const int32_t* key_mask, AttentionDims dims, float dropout_p, RngKey rng,
                        float* workspace);
int64_t attention_workspace_per_thread(int64_t T, int64_t D);
}  // namespace cpu

namespace cuda {
// The same contract as the CPU functions; the backward pass uses workspace_floats (>= T) of the
// workspace for per-row sums (ops/attention_cuda.cu).
void attention_forward(float* out, float* probs, const float* qkv, const int32_t* key_mask,
                       cpu::AttentionDims dims, float dropout_p, RngKey rng);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* probs,
                        const int32_t* key_mask, cpu::AttentionDims dims, float dropout_p,
                        RngKey rng, float* workspace, int64_t workspace_floats);
// 16-bit storage (dtype bf16 or f16) for qkv, out, dout and dqkv; probs fp32.
void attention_forward_16(void* out, float* probs, const void* qkv, DType dtype,
                          const int32_t* key_mask, cpu::AttentionDims dims, float dropout_p,
                          RngKey rng);
void attention_backward_16(void* dqkv, const void* dout, const void* qkv, DType dtype,
                           const float* probs, const int32_t* key_mask, cpu::AttentionDims dims,
                           float dropout_p, RngKey rng, float* workspace,
                           int64_t workspace_floats);
}  // namespace cuda

}  // namespace ftune
