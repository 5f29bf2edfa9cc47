// Warp and block reductions shared by the CUDA kernels. Every reduction here adds in a fixed
// order (a butterfly over the lanes of a warp, then the warps in index order), so a kernel that
// uses them gives the same bits on every run with the same launch shape. Include only from .cu
// files.
#pragma once

#include <cuda_runtime.h>

namespace ftune::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

// Sum over the 32 lanes of a warp; every lane gets the result.
template <typename T>
__device__ inline T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// Maximum over the 32 lanes of a warp; every lane gets the result.
__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Sum over a whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. `shared` holds at least 32 elements. Contains __syncthreads: call from every thread.
template <typename T>
__device__ inline T block_sum(T v, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T total = T(0);
  for (int w = 0; w < warps; ++w) total += shared[w];  // the same order in every thread
  return total;
}

// Maximum over a whole block (same requirements as block_sum); every thread gets the result.
__device__ inline float block_max(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float m = shared[0];
  for (int w = 1; w < warps; ++w) m = fmaxf(m, shared[w]);
  return m;
}

}  // namespace ftune::cuda
