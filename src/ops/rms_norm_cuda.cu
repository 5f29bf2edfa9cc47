// RMSNorm on CUDA; mirrors ops/rms_norm_cpu.cc. One block per normalised row (fixed-order block
// sums, cuda/reduce.cuh); the weight gradient by one thread per column walking the rows in order
// (deterministic, no atomics; a tiled column reduction is left to the CUDA performance work).
#include "cuda/cuda_check.h"
#include "cuda/reduce.cuh"
#include "cuda/streams.cuh"
#include "ops/rms_norm.h"

namespace ftune::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void rms_forward_kernel(float* out, int64_t ldo, float* rstd, const float* inp,
                                   int64_t ldi, const float* weight, RmsNormRows r, float eps,
                                   float offset) {
  __shared__ float shared[32];
  const int64_t i = blockIdx.x, n = i / r.heads, h = i % r.heads, C = r.C;
  const float* x = inp + n * ldi + h * C;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
  ss = block_sum(ss, shared);
  const float rs = rsqrtf(ss / static_cast<float>(C) + eps);
  float* o = out + n * ldo + h * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) o[c] = x[c] * rs * (offset + weight[c]);
  if (threadIdx.x == 0) rstd[i] = rs;
}

__global__ void rms_backward_kernel(float* dinp, int64_t lddi, const float* dout, int64_t lddo,
                                    const float* inp, int64_t ldi, const float* weight,
                                    const float* rstd, RmsNormRows r, float offset) {
  __shared__ float shared[32];
  const int64_t i = blockIdx.x, n = i / r.heads, h = i % r.heads, C = r.C;
  const float* x = inp + n * ldi + h * C;
  const float* dy = dout + n * lddo + h * C;
  float* dx = dinp + n * lddi + h * C;
  const float rs = rstd[i];
  float gx = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) gx += dy[c] * (offset + weight[c]) * x[c] * rs;
  const float mean_gx = block_sum(gx, shared) / static_cast<float>(C);
  // Each thread writes only the columns it alone reads (the same c stride): dinp may alias dout.
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dx[c] = rs * (dy[c] * (offset + weight[c]) - x[c] * rs * mean_gx);
}

__global__ void rms_weight_grad_kernel(float* dweight, const float* dout, int64_t lddo,
                                       const float* inp, int64_t ldi, const float* rstd,
                                       RmsNormRows r) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= r.C) return;
  float s = 0.0f;
  for (int64_t i = 0; i < r.N * r.heads; ++i) {
    const int64_t n = i / r.heads, h = i % r.heads;
    s += dout[n * lddo + h * r.C + c] * inp[n * ldi + h * r.C + c] * rstd[i];
  }
  dweight[c] += s;
}

}  // namespace

void rms_norm_forward(float* out, int64_t ldo, float* rstd, const float* inp, int64_t ldi,
                      const float* weight, const RmsNormRows& r, float eps, float offset) {
  if (r.N * r.heads == 0) return;
  rms_forward_kernel<<<static_cast<unsigned>(r.N * r.heads), kThreads, 0, compute_stream()>>>(
      out, ldo, rstd, inp, ldi, weight, r, eps, offset);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void rms_norm_backward(float* dinp, int64_t lddi, float* dweight, const float* dout, int64_t lddo,
                       const float* inp, int64_t ldi, const float* weight, const float* rstd,
                       const RmsNormRows& r, float offset) {
  if (r.N * r.heads == 0) return;
  // The weight gradient first: it reads dout, which dinp may overwrite.
  if (dweight) {
    rms_weight_grad_kernel<<<static_cast<unsigned>((r.C + 127) / 128), 128, 0, compute_stream()>>>(
        dweight, dout, lddo, inp, ldi, rstd, r);
    FTUNE_CUDA_CHECK_LAUNCH();
  }
  rms_backward_kernel<<<static_cast<unsigned>(r.N * r.heads), kThreads, 0, compute_stream()>>>(
      dinp, lddi, dout, lddo, inp, ldi, weight, rstd, r, offset);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
