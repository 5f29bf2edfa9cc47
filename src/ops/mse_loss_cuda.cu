// Mean squared error on CUDA; mirrors ops/mse_loss_cpu.cc (same formula, summed in double; see
// mse_loss.h for the math).
//   forward:  ONE block of 256 threads: a block-stride loop writes the residual z - t and sums the
//             counted squares and rows in double, a block reduction in a fixed order, and thread 0
//             writes the mean into the 1-element loss (no host round trip).
//   backward: every block counts the counted rows (serially, as the CPU does), then a grid-stride
//             loop writes dlogits (overwritten).
#include "cuda/cuda_check.h"
#include "cuda/reduce.cuh"
#include "cuda/streams.cuh"
#include "ops/mse_loss.h"

namespace ftune::cuda {
namespace {

constexpr unsigned kThreads = 256;

__device__ inline bool mse_counted(const int32_t* labels, int64_t i) {
  return !labels || labels[i] >= 0;
}

__global__ void __launch_bounds__(kThreads)
    mse_forward_kernel(float* loss, float* residual, const float* logits, const float* targets,
                       const int32_t* labels, int64_t B, int64_t K) {
  __shared__ double shared[32];
  double sum = 0.0, rows = 0.0;
  for (int64_t idx = threadIdx.x; idx < B * K; idx += blockDim.x) {
    const int64_t i = idx / K;
    const float r = logits[idx] - targets[idx];
    residual[idx] = r;
    if (mse_counted(labels, i)) sum += double(r) * double(r);
    if (idx % K == 0 && mse_counted(labels, i)) rows += 1.0;
  }
  sum = block_sum(sum, shared);
  rows = block_sum(rows, shared);
  // PyTorch returns NaN when nothing is counted (0 / 0); so does this.
  if (threadIdx.x == 0) loss[0] = static_cast<float>(sum / (rows * double(K)));
}

__global__ void mse_backward_kernel(float* dlogits, const float* residual, const int32_t* labels,
                                    float dloss, const float* dloss_at, int64_t B, int64_t K) {
  if (dloss_at) dloss *= *dloss_at;
  __shared__ double shared_n;
  if (threadIdx.x == 0) {
    int64_t rows = 0;
    for (int64_t i = 0; i < B; ++i) rows += mse_counted(labels, i) ? 1 : 0;
    shared_n = double(rows) * double(K);
  }
  __syncthreads();
  const double n = shared_n;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < B * K;
       idx += stride)
    dlogits[idx] = mse_counted(labels, idx / K) && n > 0
                       ? static_cast<float>(dloss * 2.0 * double(residual[idx]) / n)
                       : 0.0f;
}

}  // namespace

void mse_loss_forward(float* loss, float* residual, const float* logits, const float* targets,
                      const int32_t* labels, int64_t B, int64_t K) {
  mse_forward_kernel<<<1, kThreads, 0, compute_stream()>>>(loss, residual, logits, targets, labels,
                                                           B, K);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void mse_loss_backward(float* dlogits, const float* residual, const int32_t* labels, float dloss,
                       const float* dloss_at, int64_t B, int64_t K) {
  if (B * K == 0) return;
  mse_backward_kernel<<<grid_stride_blocks(B * K, kThreads), kThreads, 0, compute_stream()>>>(
      dlogits, residual, labels, dloss, dloss_at, B, K);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
