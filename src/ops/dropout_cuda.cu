// Dropout on CUDA: one thread per group of four elements, the same Philox stream as the CPU.
#include "cuda/cuda_check.h"
#include "ops/dropout.h"

namespace ftune::cuda {
namespace {

__global__ void dropout_kernel(float* out, const float* inp, int64_t n, float p, float scale,
                               RngKey rng) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g * 4 >= n) return;
  const Philox4 r = philox_block(rng, static_cast<uint64_t>(g));
  for (int k = 0; k < 4; ++k) {
    const int64_t i = g * 4 + k;
    if (i >= n) break;
    out[i] = philox_uniform(r.v[k]) >= p ? inp[i] * scale : 0.0f;
  }
}

}  // namespace

void dropout_apply(float* out, const float* inp, int64_t n, float p, RngKey rng) {
  if (n == 0) return;
  if (p == 0.0f) {
    if (out != inp)
      FTUNE_CUDA_CHECK(cudaMemcpy(out, inp, n * sizeof(float), cudaMemcpyDeviceToDevice));
    return;
  }
  const int64_t groups = (n + 3) / 4;
  dropout_kernel<<<grid_for(groups, 256), 256>>>(out, inp, n, p, 1.0f / (1.0f - p), rng);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
