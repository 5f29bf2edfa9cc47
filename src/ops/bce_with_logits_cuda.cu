// Binary cross-entropy with logits on CUDA; mirrors ops/bce_with_logits_cpu.cc (same formula,
// summed in double; see bce_with_logits.h for the math).
//   forward:  ONE block of 256 threads: a block-stride loop writes sigmoid(z) into `probs` and sums
//             the counted elements' losses and the counted rows in double, a block reduction in a
//             fixed order, and thread 0 writes the mean into the 1-element loss (no host round
//             trip). B x K scores are a few thousand at most; one block keeps the order fixed.
//   backward: every block counts the counted rows (serially, as the CPU does), then a grid-stride
//             loop writes dlogits (overwritten).
#include <cmath>

#include "cuda/cuda_check.h"
#include "cuda/reduce.cuh"
#include "cuda/streams.cuh"
#include "ops/bce_with_logits.h"

namespace ftune::cuda {
namespace {

constexpr unsigned kThreads = 256;

__device__ inline bool bce_counted(const int32_t* labels, int64_t i) {
  return !labels || labels[i] >= 0;
}

__global__ void __launch_bounds__(kThreads)
    bce_forward_kernel(float* loss, float* probs, const float* logits, const float* targets,
                       const int32_t* labels, int64_t B, int64_t K) {
  __shared__ double shared[32];
  double sum = 0.0, rows = 0.0;
  for (int64_t idx = threadIdx.x; idx < B * K; idx += blockDim.x) {
    const int64_t i = idx / K;
    const double z = logits[idx], t = targets[idx];
    probs[idx] = static_cast<float>(1.0 / (1.0 + exp(-z)));
    if (bce_counted(labels, i)) sum += fmax(z, 0.0) - z * t + log1p(exp(-fabs(z)));
    if (idx % K == 0 && bce_counted(labels, i)) rows += 1.0;
  }
  sum = block_sum(sum, shared);
  rows = block_sum(rows, shared);
  // PyTorch returns NaN when nothing is counted (0 / 0); so does this.
  if (threadIdx.x == 0) loss[0] = static_cast<float>(sum / (rows * double(K)));
}

__global__ void bce_backward_kernel(float* dlogits, const float* probs, const float* targets,
                                    const int32_t* labels, float dloss, const float* dloss_at,
                                    int64_t B, int64_t K) {
  if (dloss_at) dloss *= *dloss_at;
  __shared__ double shared_n;
  if (threadIdx.x == 0) {
    int64_t rows = 0;
    for (int64_t i = 0; i < B; ++i) rows += bce_counted(labels, i) ? 1 : 0;
    shared_n = double(rows) * double(K);
  }
  __syncthreads();
  const double n = shared_n;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < B * K;
       idx += stride)
    dlogits[idx] = bce_counted(labels, idx / K) && n > 0
                       ? static_cast<float>(dloss * (double(probs[idx]) - targets[idx]) / n)
                       : 0.0f;
}

}  // namespace

void bce_with_logits_forward(float* loss, float* probs, const float* logits, const float* targets,
                             const int32_t* labels, int64_t B, int64_t K) {
  bce_forward_kernel<<<1, kThreads, 0, compute_stream()>>>(loss, probs, logits, targets, labels, B,
                                                           K);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void bce_with_logits_backward(float* dlogits, const float* probs, const float* targets,
                              const int32_t* labels, float dloss, const float* dloss_at, int64_t B,
                              int64_t K) {
  if (B * K == 0) return;
  bce_backward_kernel<<<grid_stride_blocks(B * K, kThreads), kThreads, 0, compute_stream()>>>(
      dlogits, probs, targets, labels, dloss, dloss_at, B, K);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
