// MarginMSE on CUDA; mirrors ops/margin_mse_loss_cpu.cc (same formulas, summed in double; see
// margin_mse_loss.h for the math), with the block reduction the mse and bce kernels use
// (cuda/reduce.cuh, a fixed order: the same bits every run):
//   forward:  ONE block of 256 threads: a block-stride loop over the rows writes the residuals and
//             sums the counted squares and groups, block_sum adds them, thread 0 writes the mean.
//   backward: every block counts the counted groups (serially, as the CPU does), then a
//             grid-stride loop over the rows writes dlogits (overwritten).
#include "cuda/cuda_check.h"
#include "cuda/reduce.cuh"
#include "cuda/streams.cuh"
#include "ops/margin_mse_loss.h"

namespace ftune::cuda {
namespace {

constexpr unsigned kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    margin_mse_forward_kernel(float* loss, float* residual, const float* logits,
                              const float* teacher, const int32_t* labels, int64_t N,
                              int64_t group_size) {
  __shared__ double shared[32];
  double sum = 0.0, groups = 0.0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    const int64_t p = i - i % group_size;
    if (i == p) {
      residual[i] = 0.0f;
      if (labels[p] >= 0) groups += 1.0;
      continue;
    }
    const float r = (logits[p] - logits[i]) - (teacher[p] - teacher[i]);
    residual[i] = r;
    if (labels[p] >= 0) sum += double(r) * double(r);
  }
  sum = block_sum(sum, shared);
  groups = block_sum(groups, shared);
  if (threadIdx.x == 0) loss[0] = static_cast<float>(sum / (groups * double(group_size - 1)));
}

__global__ void margin_mse_backward_kernel(float* dlogits, const float* residual,
                                           const int32_t* labels, float dloss,
                                           const float* dloss_at, int64_t N, int64_t group_size) {
  if (dloss_at) dloss *= *dloss_at;
  __shared__ double shared_n;
  if (threadIdx.x == 0) {
    int64_t groups = 0;
    for (int64_t p = 0; p < N; p += group_size) groups += labels[p] >= 0 ? 1 : 0;
    shared_n = double(groups) * double(group_size - 1);
  }
  __syncthreads();
  const double n = shared_n;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N;
       i += stride) {
    const int64_t p = i - i % group_size;
    if (labels[p] < 0 || !(n > 0)) {
      dlogits[i] = 0.0f;
    } else if (i != p) {
      dlogits[i] = static_cast<float>(-2.0 * dloss * residual[i] / n);
    } else {
      double positive = 0.0;  // the group's residuals, in row order (as the CPU adds them)
      for (int64_t k = p + 1; k < p + group_size; ++k) positive += residual[k];
      dlogits[i] = static_cast<float>(2.0 * dloss * positive / n);
    }
  }
}

}  // namespace

void margin_mse_loss_forward(float* loss, float* residual, const float* logits,
                             const float* teacher, const int32_t* labels, int64_t N,
                             int64_t group_size) {
  margin_mse_forward_kernel<<<1, kThreads, 0, compute_stream()>>>(loss, residual, logits, teacher,
                                                                  labels, N, group_size);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void margin_mse_loss_backward(float* dlogits, const float* residual, const int32_t* labels,
                              float dloss, const float* dloss_at, int64_t N, int64_t group_size) {
  if (N == 0) return;
  margin_mse_backward_kernel<<<grid_stride_blocks(N, kThreads), kThreads, 0, compute_stream()>>>(
      dlogits, residual, labels, dloss, dloss_at, N, group_size);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
