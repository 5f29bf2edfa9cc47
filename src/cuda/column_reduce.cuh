// The CUDA column reduction: sums over the rows of a (rows, cols) matrix, column by column, in the
// fixed order of core/column_order.h (the CPU twin is cpu::column_reduce in ops/primitives_cpu.h).
// One primitive for every column sum of the backward pass: bias gradients (ops/linear_cuda.cu and
// the unfused bias-gradient epilogue of cuda/gemm.cu), LayerNorm's weight and bias gradients
// (ops/layer_norm_cuda.cu), DoRA's magnitude gradient (ops/lora_cuda.cu).
//
//   stage 1: a block of 32 columns x 8 lanes (256 threads) per (32 columns, chunk of rows); lane y
//            sums rows s + y, s + y + 8, ...; the 8 lane sums are added in lane order into the
//            chunk's partial (NV values per column), stored in a per-device scratch of
//            kColumnPartialFloats floats laid out [chunk][value][column];
//   stage 2: one thread per column adds the chunks' partials in chunk order and hands the totals
//            to `finish`. With a single chunk, stage 1 calls `finish` itself and stage 2 is skipped.
// Rows are split across blocks (BERT-base, 4096 x 768: 24 x 16 blocks of stage 1, each thread
// adding 32 rows), where one block per 32 columns would leave most of the GPU idle.
//
// Value and Finish are device functors (no extended lambdas in this build):
//   value(r, c, v)   writes element (r, c)'s NV values into v (called exactly once per element, so
//                    it may also update the element in place, as DoRA's backward does);
//   finish(c, t)     receives column c's NV totals (out[c] = t or out[c] += t).
// Everything runs on the compute stream; the scratch is allocated once per device on first use
// (device_malloc; cuda/column_reduce.cu) and only read in stream order, so CUDA graphs capture it.
// Include only from .cu files.
#pragma once

#include <cstdint>

#include "core/column_order.h"
#include "cuda/cuda_check.h"
#include "cuda/element.cuh"
#include "cuda/streams.cuh"

namespace ftune::cuda {

// The per-device scratch of kColumnPartialFloats floats (current device; created on first use).
float* column_partials();
// Another kColumnResultFloats floats of it, for a result that is written and then added
// (linear_cuda.cu: the fused bias gradient), and out[i] += that result[i] for i < n.
float* column_results();
void add_column_results(float* out, int64_t n);

namespace column_detail {

constexpr unsigned kThreads = 32 * kColumnLanes;

template <int NV, typename Value, typename Finish>
__global__ void __launch_bounds__(kThreads)
    chunk_kernel(Value value, Finish finish, float* partials, int64_t rows, int64_t cols,
                 int64_t chunk) {
  __shared__ float lanes[kColumnLanes][NV][32];
  const int x = threadIdx.x % 32, y = threadIdx.x / 32;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + x;
  const int64_t s = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t e = s + chunk < rows ? s + chunk : rows;
  float acc[NV];
#pragma unroll
  for (int k = 0; k < NV; ++k) acc[k] = 0.0f;
  if (c < cols)
    for (int64_t r = s + y; r < e; r += kColumnLanes) {
      float v[NV];
      value(r, c, v);
#pragma unroll
      for (int k = 0; k < NV; ++k) acc[k] += v[k];
    }
#pragma unroll
  for (int k = 0; k < NV; ++k) lanes[y][k][x] = acc[k];
  __syncthreads();
  if (y != 0 || c >= cols) return;
  float partial[NV];
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    partial[k] = 0.0f;
    for (int l = 0; l < kColumnLanes; ++l) partial[k] += lanes[l][k][x];
  }
  if (gridDim.y == 1) {  // one chunk: the total is 0 + its partial, as in stage 2
    float total[NV];
#pragma unroll
    for (int k = 0; k < NV; ++k) total[k] = 0.0f + partial[k];
    finish(c, total);
    return;
  }
#pragma unroll
  for (int k = 0; k < NV; ++k)
    partials[(static_cast<int64_t>(blockIdx.y) * NV + k) * cols + c] = partial[k];
}

template <int NV, typename Finish>
__global__ void finish_kernel(Finish finish, const float* partials, int64_t chunks, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float total[NV];
#pragma unroll
  for (int k = 0; k < NV; ++k) total[k] = 0.0f;
  for (int64_t j = 0; j < chunks; ++j)
#pragma unroll
    for (int k = 0; k < NV; ++k) total[k] += partials[(j * NV + k) * cols + c];
  finish(c, total);
}

}  // namespace column_detail

// Column sums of NV values per element over `rows` rows, handed to finish (see above).
template <int NV, typename Value, typename Finish>
void column_reduce(int64_t rows, int64_t cols, const Value& value, const Finish& finish) {
  if (cols <= 0) return;
  const int64_t values = cols * NV;
  const int64_t chunk = column_chunk_rows(rows, values);
  const int64_t chunks = column_chunks(rows, values);
  float* partials = chunks > 1 ? column_partials() : nullptr;
  const dim3 grid(grid_for(cols, 32), static_cast<unsigned>(chunks));
  column_detail::chunk_kernel<NV><<<grid, column_detail::kThreads, 0, compute_stream()>>>(
      value, finish, partials, rows, cols, chunk);
  FTUNE_CUDA_CHECK_LAUNCH();
  if (chunks == 1) return;
  column_detail::finish_kernel<NV><<<grid_for(cols, 256), 256, 0, compute_stream()>>>(
      finish, partials, chunks, cols);
  FTUNE_CUDA_CHECK_LAUNCH();
}

// The common functors: the element itself, of any float storage type with a row stride.
template <typename T>
struct ColumnElement {
  const T* x;
  int64_t ld;
  __device__ void operator()(int64_t r, int64_t c, float* v) const { v[0] = load_f32(x + r * ld + c); }
};
// out[c] = total, or out[c] += total.
struct ColumnStore {
  float* out;
  __device__ void operator()(int64_t c, const float* t) const { out[c] = t[0]; }
};
struct ColumnAdd {
  float* out;
  __device__ void operator()(int64_t c, const float* t) const { out[c] += t[0]; }
};

// out[c] (= or +=) sum over rows of x[r * ld + c], x of `type` (f32, bf16, f16).
void column_sums(float* out, bool accumulate, const void* x, DType type, int64_t ld, int64_t rows,
                 int64_t cols);

}  // namespace ftune::cuda
