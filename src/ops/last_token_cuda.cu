// Last-token pooling on CUDA; mirrors ops/last_token_cpu.cc: one thread per row finds its token,
// then one thread per element gathers; the backward pass zeroes dhidden and adds each row's
// gradient by one thread per column walking the rows in order (two rows may pool one token only
// in degenerate packed batches; the order keeps it deterministic).
#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "ops/last_token.h"

namespace ftune::cuda {
namespace {

__global__ void index_kernel(int32_t* index, const int32_t* ids, const int32_t* cu, int64_t B,
                             int64_t T, int64_t pad_id) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= B) return;
  const int64_t start = cu ? cu[b] : b * T, end = cu ? cu[b + 1] : (b + 1) * T;
  int64_t pick = end > start ? end - 1 : start;
  if (pad_id >= 0) {
    pick = start;
    for (int64_t t = end - 1; t >= start; --t)
      if (ids[t] != pad_id) {
        pick = t;
        break;
      }
  }
  index[b] = static_cast<int32_t>(pick);
}

__global__ void gather_kernel(float* out, const float* hidden, const int32_t* index, int64_t B,
                              int64_t C) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < B * C;
       e += stride)
    out[e] = hidden[static_cast<int64_t>(index[e / C]) * C + e % C];
}

__global__ void zero_kernel(float* x, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride)
    x[e] = 0.0f;
}

__global__ void scatter_kernel(float* dhidden, const float* dout, const int32_t* index, int64_t B,
                               int64_t C) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int64_t b = 0; b < B; ++b) dhidden[static_cast<int64_t>(index[b]) * C + c] += dout[b * C + c];
}

}  // namespace

void last_token_index(int32_t* index, const int32_t* ids, const int32_t* cu, int64_t B, int64_t T,
                      int64_t pad_id) {
  if (B == 0) return;
  index_kernel<<<static_cast<unsigned>((B + 127) / 128), 128, 0, compute_stream()>>>(index, ids, cu,
                                                                                     B, T, pad_id);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void gather_rows(float* out, const float* hidden, const int32_t* index, int64_t B, int64_t C) {
  if (B * C == 0) return;
  gather_kernel<<<grid_stride_blocks(B * C, 256), 256, 0, compute_stream()>>>(out, hidden, index, B,
                                                                              C);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void scatter_rows(float* dhidden, const float* dout, const int32_t* index, int64_t N, int64_t B,
                  int64_t C) {
  if (N * C == 0) return;
  zero_kernel<<<grid_stride_blocks(N * C, 256), 256, 0, compute_stream()>>>(dhidden, N * C);
  FTUNE_CUDA_CHECK_LAUNCH();
  if (B == 0) return;
  scatter_kernel<<<static_cast<unsigned>((C + 127) / 128), 128, 0, compute_stream()>>>(dhidden, dout,
                                                                                       index, B, C);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
