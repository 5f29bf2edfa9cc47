// cuDNN's fused flash attention (scaled dot-product attention through the cudnn_frontend graph
// API: sdpa and sdpa_backward nodes) on ftune's layouts, for bf16 / f16 runs. Compiled only when
// CMake found cudnn.h, libcudnn and cudnn_frontend.h (FTUNE_WITH_CUDNN_SDPA); without them every
// function throws DeviceError("not built with cuDNN attention ...") and the attention op keeps its
// own kernels. Plain C++ header: no cuDNN or CUDA includes.
//
// Layouts (C = H * D, ftune's ops/attention.h):
//   qkv        (B*T, 3C) bf16/f16  per token [q | k | v]; q, k, v are strided views of it:
//              element (b, h, t, d) of q at qkv[(b*T + t)*3C + h*D + d], k at + C, v at + 2C
//   out        (B*T, C)            head h in columns [h*D, (h+1)*D)
//   stats      (B, H, T) f32       per query row: log-sum-exp of the scaled, masked scores — what
//                                  backward needs instead of the (B, H, T, T) probabilities
//   seq_lens   (2B) i32 device     [0, B): query lengths, all T (padding query rows are computed,
//                                  as HF and the CPU op do); [B, 2B): key lengths, 1 + the last
//                                  real key (sdpa_seq_lens_from_mask writes both)
//   rng        (2) i64 device      dropout seed and offset (sdpa_write_rng), read by forward and
//                                  backward alike, so backward regenerates forward's mask
//   dqkv       (B*T, 3C)           overwritten (activation gradient rule: =), padding rows and
//                                  padding keys' dk, dv zero
// Ragged (packed rows, SdpaShape::ragged; data/token_batch.h): qkv (N, 3C) and out (N, C) hold the
// B sequences back to back, no padding, sequence b at tokens [cu[b], cu[b + 1]); cuDNN reads them
// through ragged offsets (element offsets of each sequence's first token, B + 1 of them, i64):
//   ragged     (2(B+1)) i64 device [0, B]: cu[b] * 3C (q, k, v and their gradients);
//                                  [B+1, 2B+1]: cu[b] * C (out, dout); seq_lens: both cu[b+1]-cu[b]
// (sdpa_ragged_from_cu writes them from the device's cu_seqlens: no host copy). T is the longest
// sequence allowed; stats stay (B, H, T) padded. cuDNN runs ragged graphs on sm_90 and newer only
// (elsewhere the build answers "not supported", a refusal as any other).
// The padding mask is cuDNN's per-sequence length mask (ftune's batches are right-padded: keys
// from the last real key on are padding). Unlike the CPU op, a sequence with no real key at all is
// given every key (seq_len_kv = T) rather than a uniform distribution; ftune's batches never hold
// one (every row starts with [CLS]).
//
// Dropout: cuDNN draws its own Philox mask from (seed, offset), not ftune's (seed, site, step,
// element) streams, so masks differ from the CPU and from ftune's CUDA kernel. Runs that must
// match the CPU (parity tests, resume checks across devices) use ftune's attention kernel.
//
// Built graphs are cached per (device, B, T, H, D, dtype, dropout p) with their workspace
// size (cuda/sdpa_plan_cache.h); a graph build takes tens to hundreds of milliseconds, so callers
// should keep the set of T small (the trainer pads T to a few buckets on a GPU). Only cuDNN's
// "not supported" answer is remembered as a refusal of the shape (SdpaNotSupported); out of
// memory (OutOfMemoryError) and other errors (DeviceError) during a build propagate and the next
// call builds again. Backward uses cuDNN's deterministic algorithm where it has one for the shape
// (same bits every run), else the default one, with a warning and a count in summary.json
// (gpu_paths.cudnn_plans.nondeterministic_backward). Builds and their time are counted there too.
// The workspace is the caller's planned buffer: cudnn_sdpa_workspace_bytes(shape) tells the
// planner how much (the larger of forward and backward), and nothing is allocated per call.
// Every call runs on cuda::compute_stream().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/host_device.h"
#include "core/philox.h"

namespace ftune::cuda {

enum class SdpaDtype { BF16, F16 };

struct SdpaShape {
  int64_t B = 0, T = 0, H = 0, D = 0;
  SdpaDtype dtype = SdpaDtype::BF16;
  float dropout = 0;  // attention-probability dropout; 0 in evaluation
  bool ragged = false;  // packed rows through ragged offsets (above)
  int64_t tokens = 0;   // ragged: the call's N tokens (not part of the plan; B*T when padded)
  int64_t rows() const { return ragged ? tokens : B * T; }  // token rows of qkv and out
  bool operator==(const SdpaShape&) const = default;
};

// The shape checks that need no GPU: D a multiple of 8 and at most 128 (256 on sm_90+ is left to
// cuDNN), C = H * D a multiple of 8 (16-byte aligned q/k/v views), T >= 1, 0 <= dropout < 1.
// Returns "" when the shape is acceptable, else what is wrong.
std::string sdpa_shape_problem(const SdpaShape& shape);

// Whether cuDNN can run forward and backward of `shape` on the current device: builds (and caches)
// both graphs. False, with *why set (cuDNN's own message), when not built with cuDNN attention,
// the shape is refused, or cuDNN finds no engine (e.g. before sm_80). A build that fails for any
// other reason throws (OutOfMemoryError, DeviceError): it is not an answer about the shape.
bool cudnn_sdpa_supported(const SdpaShape& shape, std::string* why);

// Workspace bytes forward and backward of `shape` need (the larger); builds and caches the
// graphs. Throws SdpaNotSupported (a DeviceError) when cudnn_sdpa_supported() would say no.
size_t cudnn_sdpa_workspace_bytes(const SdpaShape& shape);

// out = softmax(q k^T / sqrt(D), keys masked by seq_lens) v, with dropout on the probabilities;
// stats saved for backward. workspace_bytes must be >= cudnn_sdpa_workspace_bytes(shape).
// ragged: the offsets above when shape.ragged, else null.
void cudnn_sdpa_forward(void* out, float* stats, const void* qkv, const int32_t* seq_lens,
                        const int64_t* ragged, const int64_t* rng, const SdpaShape& shape,
                        void* workspace, size_t workspace_bytes);

// dqkv = gradient of the forward above (same qkv, out, stats, seq_lens and rng).
void cudnn_sdpa_backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                         const float* stats, const int32_t* seq_lens, const int64_t* ragged,
                         const int64_t* rng, const SdpaShape& shape, void* workspace,
                         size_t workspace_bytes);

// seq_lens (2B) from ftune's key mask (B, T) i32 (1 = real token), on the compute stream:
// queries T each, keys 1 + the last real key (T when a row has none).
void sdpa_seq_lens_from_mask(int32_t* seq_lens, const int32_t* key_mask, int64_t B, int64_t T);
// Packed rows: seq_lens (2B) and ragged (2(B+1)) from cu_seqlens (B + 1) on the device (the layout
// above; C = H * D), on the compute stream. sdpa_ragged_entry computes one sequence's entries (the
// kernel runs it per b; the CPU tests check it).
void sdpa_ragged_from_cu(int32_t* seq_lens, int64_t* ragged, const int32_t* cu, int64_t B,
                         int64_t C);
struct SdpaRaggedEntry {
  int32_t seq_len = 0;               // seq_lens[b] and seq_lens[B + b] (b < B)
  int64_t qkv_offset = 0, out_offset = 0;  // ragged[b], ragged[B + 1 + b] (b <= B)
};
FTUNE_HD SdpaRaggedEntry sdpa_ragged_entry(const int32_t* cu, int64_t B, int64_t C, int64_t b) {
  SdpaRaggedEntry e;
  if (b < B) e.seq_len = cu[b + 1] - cu[b];
  e.qkv_offset = static_cast<int64_t>(cu[b]) * 3 * C;
  e.out_offset = static_cast<int64_t>(cu[b]) * C;
  return e;
}
// rng (2) = {seed, offset}, written by a one-thread kernel on the compute stream (no host copy):
// the seed mixes (key.seed, key.site, row0), the offset is key.offset << 32, so steps, layers and
// micro-batches draw different masks. key.offset and row0 come from key.micro when set (read by the
// kernel: a replayed CUDA graph sees the micro-batch's values; core/philox.h).
void sdpa_write_rng(int64_t* rng, RngKey key, uint64_t row0);

}  // namespace ftune::cuda
