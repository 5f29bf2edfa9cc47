// Embedding lookup and its sparse gradient on CUDA; mirrors ops/embedding_cpu.cc.
//   forward:  out (N, C) = table[ids] (or +=), four elements of a row per thread with 128-bit
//             accesses when C is a multiple of 4 and out / table are 16-byte aligned (then every
//             row is), one element per thread otherwise; a copy or one add per element either way.
//   backward: dtable[ids[n]] += dout[n], deterministic without atomics or sorting: one block per
//             token n; the block of the FIRST token with a given id owns that table row and adds
//             the gradients of every token with that id in token order, starting from the row's
//             current value. That is exactly the CPU's order of additions, so the result is
//             bit-identical to the CPU and to itself on every run. Tokens that are not the first
//             of their id, and padding_idx tokens, return at once. Cost: each block scans the ids
//             (N/32 warp ballots), O(N^2 / 32) id compares in all — small next to the GEMMs for
//             the token counts of a micro-batch (a few thousand), but quadratic; a sort-based
//             segmented reduction would replace it if N grows to tens of thousands.
#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "cuda/reduce.cuh"
#include "cuda/vec.cuh"
#include "ops/embedding.h"

namespace ftune::cuda {
namespace {

constexpr unsigned kBackwardThreads = 256;

// V = 4: C % 4 == 0 and aligned rows, element i .. i + 3 of out in one float4; V = 1: one element.
template <int V>
__global__ void embedding_forward_kernel(float* out, const int32_t* ids, const float* table,
                                         int64_t N, int64_t C, bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * V;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < N * C;
       i += stride) {
    const int64_t n = i / C, c = i % C;
    const float* row = table + static_cast<int64_t>(ids[n]) * C;
    float v[V];
    load_vec<V>(row + c, v);
    if (accumulate) {
      float o[V];
      load_vec<V>(out + i, o);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = o[j] + v[j];
    }
    store_vec<V>(out + i, v);
  }
}

__global__ void embedding_backward_kernel(float* dtable, const float* dout, const int32_t* ids,
                                          int64_t N, int64_t C, int64_t padding_idx) {
  const int64_t n = blockIdx.x;
  const int32_t id = ids[n];
  if (id == padding_idx) return;  // the same for the whole block
  // Only the block of the first token with this id writes its row.
  int earlier = 0;
  for (int64_t m = threadIdx.x; m < n; m += blockDim.x)
    if (ids[m] == id) {
      earlier = 1;
      break;
    }
  if (__syncthreads_or(earlier)) return;

  float* row = dtable + static_cast<int64_t>(id) * C;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // Warp w handles columns [c0, c0 + 32) for c0 = 32 w, 32 w + blockDim.x, ...; c0 is the same
  // for all lanes of a warp, so the ballots below always see the whole warp.
  for (int64_t c0 = static_cast<int64_t>(warp) * 32; c0 < C; c0 += blockDim.x) {
    const int64_t c = c0 + lane;
    float acc = c < C ? row[c] : 0.0f;
    for (int64_t base = n; base < N; base += 32) {
      const int64_t m = base + lane;
      unsigned match = __ballot_sync(kFullMask, m < N && ids[m] == id);
      while (match) {  // matching tokens in increasing order
        const int j = __ffs(match) - 1;
        match &= match - 1;
        if (c < C) acc += dout[(base + j) * C + c];
      }
    }
    if (c < C) row[c] = acc;
  }
}

}  // namespace

void embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int64_t C,
                       bool accumulate) {
  if (N * C == 0) return;
  if (C % 4 == 0 && all_aligned16(out, table))
    embedding_forward_kernel<4><<<grid_stride_blocks(N * C / 4, 256), 256, 0, compute_stream()>>>(
        out, ids, table, N, C, accumulate);
  else
    embedding_forward_kernel<1><<<grid_stride_blocks(N * C, 256), 256, 0, compute_stream()>>>(
        out, ids, table, N, C, accumulate);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C,
                        int64_t padding_idx) {
  if (N * C == 0) return;
  embedding_backward_kernel<<<static_cast<unsigned>(N), kBackwardThreads, 0, compute_stream()>>>(dtable, dout, ids, N, C,
                                                                            padding_idx);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
