// cuDNN's fused flash attention as the CUDA kernel of 16-bit attention (training.attention:
// cudnn), behind the attention op's own contract (ops/attention.h): same inputs, same outputs.
//
// What cuDNN keeps instead of the (B, H, T, T) probabilities (its "state"), from the start of the
// call's probs buffer, in this layout (byte offsets; align16(n) rounds n up to a multiple of 16):
//   stats     at 0                                (B, H, T) f32: softmax log-sum-exp per query row
//   seq_lens  at S = align16(4 B H T)             (2B) i32: query lengths, then key lengths
//   rng       at R = align16(S + 8 B)             (2) i64: dropout seed and offset
//   ragged    at G = R + 16                       (2(B+1)) i64: packed rows' offsets (below)
//   end       =  G + 16 (B + 1) bytes = 4 * cudnn_attention_state_floats(B, H, T)
// A run that uses cuDNN (uses_cudnn_attention: the kernel chosen, a GPU, 16-bit compute) plans
// per layer slot only this: a flat f32 buffer of cudnn_attention_state_floats(max_batch, H,
// max_seq) elements (BERT-base, B=32, T=512: 0.75 MiB where the probabilities take 384 MiB),
// plus cuDNN's workspace (cudnn_attention_workspace_floats). The attention op knows the flat
// (rank-1) buffer from the (B, H, T, T) one.
//
// The contract of a run on the small buffer (cuDNN's refusal is decided once, not per call):
//   - up front, before the first step, the run's planner probes cuDNN with the run's largest shape
//     (rows of the plan x longest sequence, the training dropout and 0 for evaluation;
//     cudnn_attention_probe) where the GPU is visible; a refusal (shape not supported, workspace
//     larger than planned) makes the whole run use ftune's kernel, with the (B, H, T, T)
//     probabilities planned, and one warning (train/batch_plan.cc);
//   - a call that cuDNN refuses later (some smaller shape) runs ftune's kernel for that call
//     alone when the flat buffer holds its B*H*T*T probabilities (the planned buffer is
//     max_batch*H*max_seq floats, so short or narrow batches often fit), with one warning per
//     shape; when it does not, the call throws ShapeError naming the shape, cuDNN's reason and
//     `training.attention: ftune`. Forward, backward and checkpointing's recomputation of a
//     layer make the same choice (it depends only on the shape, the buffers and the cached
//     build), so a layer never mixes the two kernels and the state written by the forward pass
//     (or its recomputation) is what the backward pass reads;
//   - the workspace must hold cuDNN's (cudnn_sdpa_workspace_bytes of the shape); a call whose
//     workspace is smaller is refused as above.
// The choice of cuDNN travels with each call (AttentionCall::kernel, ops/attention.h; the run's
// training.attention): no process-wide setting. A call whose buffer also holds ftune's
// probabilities runs ftune's kernel when cuDNN refuses it, with one warning per shape.
// Today's graphs take BERT's case: the fused QKV layout, bidirectional, equal heads, scale
// 1/sqrt(D), no window or soft-cap; the attention op passes no qkv for other calls. Padded rows:
// qkv (B, T, 3C) with the key mask. Packed rows (varlen: cu_seqlens, data/token_batch.h): qkv
// (N, 3C), cuDNN's ragged layout (cuda/cudnn_attention.h), its offsets and sequence lengths
// written from the device's cu_seqlens into the state's `ragged` and `seq_lens` (no host copy);
// T is the call's longest row allowed and stats stay (B, H, T). Counted as
// gpu_paths.attention.packed_cudnn (of cudnn), and packed calls that ftune's varlen kernel runs as
// packed_ftune (of ftune). cuDNN builds ragged graphs on sm_90 and newer only: elsewhere it refuses
// them and the rules above apply (a run on the small buffer fails where the call does not fit).
//
// Dropout draws cuDNN's Philox masks, not ftune's: seed from (run seed, site, row0 of the
// micro-batch), offset from the optimizer step. Forward and backward (and checkpointing's
// recomputation) see the same mask, but masks differ from the CPU's and from ftune's CUDA kernel,
// and they depend on how a step is cut into micro-batches. Runs that must match the CPU (the GPU
// kit's parity stage, tools/gpu_kit/kit_train.py) or stay micro-batch invariant use
// training.attention: ftune.
// Plain C++; the cuDNN calls go through src/cuda/cudnn_attention.h.
#pragma once

#include <cstdint>

#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "ops/attention.h"

namespace ftune {

// The call as cuDNN sees it: (B, T, H, D) and the dropout row of the micro-batch; packed rows:
// their (B + 1) row starts on the device and the call's N tokens.
struct CudnnAttentionDims {
  int64_t B = 0, T = 0, H = 0, D = 0;
  uint64_t row0 = 0;
  const int32_t* cu_seqlens = nullptr;
  int64_t tokens = 0;
};

// Whether a run plans cuDNN's state instead of the probabilities: the kernel is cuDNN, the device
// a GPU and the compute type 16-bit (cuDNN's flash attention has no fp32).
bool uses_cudnn_attention(AttentionKernel kernel, Device device, DType compute);

// Floats of cuDNN's state for attention of (B, H, T) (the layout above, rounded up to whole
// 16-byte units).
int64_t cudnn_attention_state_floats(int64_t B, int64_t H, int64_t T);

// What the attention category of a plan holds, for `ftune plan`, `ftune doctor` and summary.json.
const char* attention_memory_note(bool cudnn_state);

// Whether cuDNN runs attention of (B, T, H, D) in 16-bit `dtype` on GPU `device` (made the
// current device: cuDNN's graphs are built for, and cached per, the current device), training
// (dropout_p) and evaluating (dropout 0), within cudnn_attention_workspace_floats(B, H, T, D) of
// workspace: "" when it does, else why not. Builds (and caches) the graphs, tens to hundreds of
// milliseconds; needs the GPU (without one, or without cuDNN in the build, says so).
// packed: cuDNN's ragged layout for B packed rows of up to T tokens.
std::string cudnn_attention_probe(Device device, int64_t B, int64_t T, int64_t H, int64_t D,
                                  DType dtype, float dropout_p, bool packed = false);

// What the planner reserves for cuDNN attention of up to (B, H, T, D) on top of the CUDA
// kernel's own workspace: an fp32 (B, H, T, D) accumulator for dQ (what cuDNN's deterministic
// backward uses) plus 16 MiB of slack, in floats.
int64_t cudnn_attention_workspace_floats(int64_t B, int64_t H, int64_t T, int64_t D);

// Run the pass of a call whose kernel is cuDNN through cuDNN and return true when it qualifies
// (CUDA, 16-bit storage, the fused layout: qkv (B, T, 3C) defined, cuDNN built and accepting the
// shape, the buffers large enough); return false, having done nothing, when ftune's kernel must
// run (probs then holds its probabilities). Throws ShapeError when cuDNN refuses a call whose
// buffer has no room for ftune's kernel (see above).
bool try_cudnn_attention_forward(TensorView out, TensorView probs, TensorView qkv,
                                 TensorView key_mask, const CudnnAttentionDims& d,
                                 float dropout_p, RngKey rng, TensorView workspace);
// `out`: the forward pass's output (cuDNN's backward reads it).
bool try_cudnn_attention_backward(TensorView dqkv, TensorView dout, TensorView qkv,
                                  TensorView out, TensorView probs, TensorView key_mask,
                                  const CudnnAttentionDims& d, float dropout_p, RngKey rng,
                                  TensorView workspace);

}  // namespace ftune
