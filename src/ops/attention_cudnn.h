// cuDNN's fused flash attention as the CUDA kernel of 16-bit attention (training.attention:
// cudnn), behind the attention op's own contract (ops/attention.h): same inputs, same outputs, the
// same planned buffers. What changes inside:
//   - the (B, H, T, T) probs buffer of the call holds, from its start, what cuDNN keeps instead of
//     probabilities: the softmax statistics (B, H, T) fp32, then the per-sequence lengths (2B i32)
//     and the dropout seed / offset (2 i64), each 16-byte aligned; the buffer is far larger than
//     that for every T >= 2 (a call whose buffer is too small runs ftune's kernel);
//   - the workspace must hold cuDNN's (cudnn_sdpa_workspace_bytes of the shape); the planner adds
//     cudnn_attention_workspace_floats for it, and a shape that needs more runs ftune's kernel
//     (with one warning per shape);
//   - dropout draws cuDNN's Philox masks, not ftune's: seed from (run seed, site, row0 of the
//     micro-batch), offset from the optimizer step. Forward and backward (and checkpointing's
//     recomputation) see the same mask, but masks differ from the CPU's and from ftune's CUDA
//     kernel, and they depend on how a step is cut into micro-batches. Runs that must match the
//     CPU (tools/gpu_parity.py) or stay micro-batch invariant use training.attention: ftune.
// The choice is process-wide (set_attention_kernel, by the trainer); every qualifying call of the
// forward and the backward pass makes the same decision, so a layer never mixes the two kernels.
// Plain C++; the cuDNN calls go through src/cuda/cudnn_attention.h.
#pragma once

#include <cstdint>

#include "core/philox.h"
#include "core/tensor.h"
#include "ops/attention.h"

namespace ftune {

enum class AttentionKernel : uint8_t { Ftune, Cudnn };

void set_attention_kernel(AttentionKernel kernel);  // default Ftune
AttentionKernel attention_kernel();
const char* attention_kernel_name(AttentionKernel kernel);  // "ftune", "cudnn"

// What the planner reserves for cuDNN attention of up to (B, H, T, D) on top of the CUDA
// kernel's own workspace: an fp32 (B, H, T, D) accumulator for dQ (what cuDNN's deterministic
// backward uses) plus 16 MiB of slack, in floats.
int64_t cudnn_attention_workspace_floats(int64_t B, int64_t H, int64_t T, int64_t D);

// Run the pass through cuDNN and return true when the process uses cuDNN attention and this call
// qualifies (CUDA, 16-bit storage, cuDNN built and accepting the shape, the buffers large
// enough); return false, having done nothing, when ftune's kernel must run.
bool try_cudnn_attention_forward(TensorView out, TensorView probs, TensorView qkv,
                                 TensorView key_mask, const cpu::AttentionDims& d,
                                 float dropout_p, RngKey rng, TensorView workspace);
// `out`: the forward pass's output (cuDNN's backward reads it).
bool try_cudnn_attention_backward(TensorView dqkv, TensorView dout, TensorView qkv,
                                  TensorView out, TensorView probs, TensorView key_mask,
                                  const cpu::AttentionDims& d, float dropout_p, RngKey rng,
                                  TensorView workspace);

}  // namespace ftune
