// Gated activation on CUDA; mirrors ops/glu_cpu.cc (ops/glu_math.h): one thread per (n, f).
#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "ops/glu.h"
#include "ops/glu_math.h"

namespace ftune::cuda {
namespace {

__global__ void glu_forward_kernel(float* out, const float* gu, int64_t N, int64_t F, GluAct act) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < N * F;
       e += stride) {
    const int64_t n = e / F, f = e % F;
    out[e] = glu_act_value(gu[n * 2 * F + f], act) * gu[n * 2 * F + F + f];
  }
}

__global__ void glu_backward_kernel(float* dgu, const float* gu, const float* dout, int64_t N,
                                    int64_t F, GluAct act) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < N * F;
       e += stride) {
    const int64_t n = e / F, f = e % F;
    const float g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f], dy = dout[e];
    dgu[n * 2 * F + f] = dy * u * glu_act_grad(g, act);
    dgu[n * 2 * F + F + f] = dy * glu_act_value(g, act);
  }
}

}  // namespace

void glu_forward(float* out, const float* gu, int64_t N, int64_t F, GluAct act) {
  if (N * F == 0) return;
  glu_forward_kernel<<<grid_stride_blocks(N * F, 256), 256, 0, compute_stream()>>>(out, gu, N, F,
                                                                                   act);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void glu_backward(float* dgu, const float* gu, const float* dout, int64_t N, int64_t F,
                  GluAct act) {
  if (N * F == 0) return;
  glu_backward_kernel<<<grid_stride_blocks(N * F, 256), 256, 0, compute_stream()>>>(dgu, gu, dout,
                                                                                    N, F, act);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
