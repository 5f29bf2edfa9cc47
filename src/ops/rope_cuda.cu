// RoPE on CUDA; mirrors ops/rope_cpu.cc: one thread per (token, head, rotated pair), the same fp32
// expressions (cosf / sinf of the fp32 angle).
#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "ops/rope.h"

namespace ftune::cuda {
namespace {

__global__ void rope_kernel(float* x, const int32_t* positions, const float* inv_freq, RopeRows r,
                            float scaling, float sign) {
  const int64_t half = r.rotary_dim / 2, total = r.N * r.heads * half;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += stride) {
    const int64_t i = e % half, h = (e / half) % r.heads, n = e / (half * r.heads);
    const float a = static_cast<float>(positions[n]) * inv_freq[i];
    const float c = cosf(a) * scaling, s = sign * sinf(a) * scaling;
    float* xh = x + n * r.ld + h * r.head_dim;
    const float x1 = xh[i], x2 = xh[i + half];
    xh[i] = x1 * c - x2 * s;
    xh[i + half] = x2 * c + x1 * s;
  }
}

}  // namespace

void rope_rotate(float* x, const int32_t* positions, const float* inv_freq, const RopeRows& r,
                 float scaling, float sign) {
  const int64_t total = r.N * r.heads * (r.rotary_dim / 2);
  if (total == 0) return;
  rope_kernel<<<grid_stride_blocks(total, 256), 256, 0, compute_stream()>>>(x, positions, inv_freq,
                                                                            r, scaling, sign);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
