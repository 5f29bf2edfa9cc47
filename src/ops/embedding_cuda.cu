// Embedding lookup and its sparse gradient on CUDA; mirrors ops/embedding_cpu.cc.
//   forward:  out (N, C) = table[ids] (or +=), four elements of a row per thread with 128-bit
//             accesses (64-bit reads of a bf16 / f16 table) when C is a multiple of 4 and out /
//             table are 16-byte aligned (then every row is), one element per thread otherwise; a
//             copy or one add per element either way, a 16-bit element widened exactly.
//   backward: dtable[ids[n]] += dout[n] in the order of additions of ops/embedding.h, the CPU's,
//             bit for bit, with no atomics:
//     1. keys = ids, values = token indices; CUB's radix sort (stable) over the bits of V;
//     2. pieces: one block per (window of 64 sorted entries, 256 columns); every thread walks the
//        window's entries (the same entry at a time across the block: no divergence) adding its
//        column of dout from 0; at the end of each piece, a row whose id lies entirely inside
//        this window gets row += piece (the only writer of that row), the first piece of a window
//        that continues an id from the previous window goes to head[window], a last piece that
//        continues into the next window to tail[window];
//     3. segments: for each id that starts in window w and continues, one thread per column adds
//        row + tail[w] + head[w + 1] + ... in window order (16 windows' heads loaded at a time)
//        and writes the row.
//   A table row of N equal ids (token types) is N / 64 blocks of 64 additions plus one chain of
//   N / 64 additions per column, where it was one block adding N rows serially.
#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "cuda/vec.cuh"
#include "ops/embedding.h"

namespace ftune::cuda {
namespace {

// V = 4: C % 4 == 0 and aligned rows, element i .. i + 3 of out in one float4 (of the table: one
// float4, or 8 bytes of a 16-bit table, widened exactly); V = 1: one element.
template <int V, typename T>
__global__ void embedding_forward_kernel(float* out, const int32_t* ids, const T* table,
                                         int64_t N, int64_t C, bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * V;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < N * C;
       i += stride) {
    const int64_t n = i / C, c = i % C;
    const T* row = table + static_cast<int64_t>(ids[n]) * C;
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

constexpr int kWindow = static_cast<int>(kEmbeddingWindow);
constexpr unsigned kColumnsPerBlock = 256;
constexpr int kHeadsAtOnce = 16;
constexpr uint32_t kNoId = 0xffffffffu;

__global__ void sort_inputs_kernel(uint32_t* keys, int32_t* values, const int32_t* ids, int64_t N) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N) return;
  keys[i] = static_cast<uint32_t>(ids[i]);
  values[i] = static_cast<int32_t>(i);
}

// Stage 2 of the header comment: the pieces of window blockIdx.x, columns of blockIdx.y.
__global__ void __launch_bounds__(kColumnsPerBlock)
    embedding_pieces_kernel(float* dtable, float* head, float* tail, const float* dout,
                            const uint32_t* sorted_ids, const int32_t* sorted_tokens, int64_t N,
                            int64_t C, int64_t padding_idx) {
  __shared__ uint32_t s_id[kWindow];
  __shared__ int32_t s_token[kWindow];
  __shared__ uint32_t s_before, s_after;  // the ids just outside the window (kNoId: none)
  const int64_t w = blockIdx.x, start = w * kWindow;
  const int n = static_cast<int>(N - start < kWindow ? N - start : kWindow);
  if (threadIdx.x < static_cast<unsigned>(n)) {
    s_id[threadIdx.x] = sorted_ids[start + threadIdx.x];
    s_token[threadIdx.x] = sorted_tokens[start + threadIdx.x];
  }
  if (threadIdx.x == 0) {
    s_before = start > 0 ? sorted_ids[start - 1] : kNoId;
    s_after = start + n < N ? sorted_ids[start + n] : kNoId;
  }
  __syncthreads();
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kColumnsPerBlock + threadIdx.x;
  if (c >= C) return;
  float acc = 0.0f;
  int piece_start = 0;
  for (int e = 0; e < n; ++e) {
    acc += dout[static_cast<int64_t>(s_token[e]) * C + c];
    const uint32_t id = s_id[e];
    if (e + 1 < n && s_id[e + 1] == id) continue;  // the piece goes on (uniform in the block)
    if (static_cast<int64_t>(id) != padding_idx) {
      const bool from_before = piece_start == 0 && s_before == id;
      const bool to_after = e == n - 1 && s_after == id;
      if (from_before)
        head[w * C + c] = acc;
      else if (to_after)
        tail[w * C + c] = acc;
      else
        dtable[static_cast<int64_t>(id) * C + c] += acc;
    }
    acc = 0.0f;
    piece_start = e + 1;
  }
}

// Stage 3: the id whose last piece in window blockIdx.x continues into the next window and did
// not come from the previous one owns the chain of its windows.
__global__ void __launch_bounds__(kColumnsPerBlock)
    embedding_segments_kernel(float* dtable, const float* head, const float* tail,
                              const uint32_t* sorted_ids, int64_t N, int64_t C, int64_t windows,
                              int64_t padding_idx) {
  const int64_t w = blockIdx.x, start = w * kWindow, end = start + kWindow;
  if (end >= N) return;  // the last window: nothing continues
  const uint32_t id = sorted_ids[end - 1];
  if (sorted_ids[end] != id || static_cast<int64_t>(id) == padding_idx) return;
  if (start > 0 && sorted_ids[start] == id && sorted_ids[start - 1] == id) return;  // not its start
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kColumnsPerBlock + threadIdx.x;
  if (c >= C) return;
  float* row = dtable + static_cast<int64_t>(id) * C + c;
  float acc = *row + tail[w * C + c];
  // Window x holds a piece of the id iff its first entry is the id (sorted): load kHeadsAtOnce
  // windows' heads at a time (independent loads), add them in window order.
  for (int64_t x0 = w + 1; x0 < windows; x0 += kHeadsAtOnce) {
    float h[kHeadsAtOnce];
    bool in[kHeadsAtOnce];
#pragma unroll
    for (int j = 0; j < kHeadsAtOnce; ++j) {
      const int64_t x = x0 + j;
      in[j] = x < windows && sorted_ids[x * kWindow] == id;
      h[j] = in[j] ? head[x * C + c] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kHeadsAtOnce; ++j)
      if (in[j]) acc += h[j];
    if (!in[kHeadsAtOnce - 1]) break;
  }
  *row = acc;
}

int key_bits(int64_t V) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) < V) ++bits;
  return bits;
}

}  // namespace

void embedding_forward(float* out, const int32_t* ids, const void* table, DType table_dtype,
                       int64_t N, int64_t C, bool accumulate) {
  if (N * C == 0) return;
  with_float_type(table_dtype, const_cast<void*>(table), [&](auto* t) {
    if (C % 4 == 0 && all_aligned16(out, t))
      embedding_forward_kernel<4><<<grid_stride_blocks(N * C / 4, 256), 256, 0, compute_stream()>>>(
          out, ids, t, N, C, accumulate);
    else
      embedding_forward_kernel<1><<<grid_stride_blocks(N * C, 256), 256, 0, compute_stream()>>>(
          out, ids, t, N, C, accumulate);
  });
  FTUNE_CUDA_CHECK_LAUNCH();
}

void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C,
                        int64_t V, int64_t padding_idx, void* workspace) {
  if (N * C == 0) return;
  if (N > INT32_MAX)
    throw ShapeError("embedding_backward: " + std::to_string(N) + " tokens exceed 2^31");
  const EmbeddingCudaLayout l = embedding_cuda_layout(N, C);
  char* ws = static_cast<char*>(workspace);
  cudaStream_t stream = compute_stream();
  cub::DoubleBuffer<uint32_t> keys(reinterpret_cast<uint32_t*>(ws + l.keys0),
                                   reinterpret_cast<uint32_t*>(ws + l.keys1));
  cub::DoubleBuffer<int32_t> values(reinterpret_cast<int32_t*>(ws + l.values0),
                                    reinterpret_cast<int32_t*>(ws + l.values1));
  sort_inputs_kernel<<<grid_for(N, 256), 256, 0, stream>>>(keys.Current(), values.Current(), ids,
                                                          N);
  FTUNE_CUDA_CHECK_LAUNCH();
  const int bits = key_bits(V);
  size_t sort_bytes = 0;
  FTUNE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, values,
                                                   static_cast<int>(N), 0, bits, stream));
  if (sort_bytes > static_cast<size_t>(l.sort_bytes))
    throw InternalError("embedding_backward: CUB's radix sort of " + std::to_string(N) +
                        " keys wants " + std::to_string(sort_bytes) + " bytes of scratch, " +
                        std::to_string(l.sort_bytes) +
                        " are planned (embedding_sort_scratch_bytes)");
  FTUNE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ws + l.sort, sort_bytes, keys, values,
                                                   static_cast<int>(N), 0, bits, stream));
  const int64_t windows = (N + kWindow - 1) / kWindow;
  const dim3 grid(static_cast<unsigned>(windows), grid_for(C, kColumnsPerBlock));
  float* head = reinterpret_cast<float*>(ws + l.head);
  float* tail = reinterpret_cast<float*>(ws + l.tail);
  embedding_pieces_kernel<<<grid, kColumnsPerBlock, 0, stream>>>(
      dtable, head, tail, dout, keys.Current(), values.Current(), N, C, padding_idx);
  FTUNE_CUDA_CHECK_LAUNCH();
  if (windows == 1) return;
  embedding_segments_kernel<<<grid, kColumnsPerBlock, 0, stream>>>(
      dtable, head, tail, keys.Current(), N, C, windows, padding_idx);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
