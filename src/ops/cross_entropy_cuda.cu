// Softmax cross-entropy on CUDA; mirrors ops/cross_entropy_cpu.cc (same formulas, the same
// float / double mix, see cross_entropy.h for the math).
//   forward:  ONE block: warp w takes rows w, w + 32, ...: max, sum of exp in double, softmax into
//             `probs`, and the row's weighted NLL and smoothing terms, accumulated per warp in
//             double; the warps' sums are then added in warp order and the loss is written to the
//             1-element device tensor (no host round trip). B rows of K classes are small for a
//             classifier; one block keeps the reduction order fixed without a second launch.
//   backward: every block recomputes the two scalars W = sum of counted rows' weights and
//             S_w = sum_c w[c] (serially, in the CPU's order), then a grid-stride loop writes
//             dlogits (overwritten).
#include <cmath>

#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "cuda/reduce.cuh"
#include "ops/cross_entropy.h"

namespace ftune::cuda {
namespace {

constexpr unsigned kForwardThreads = 1024;

__device__ inline float class_weight(const float* weights, int64_t c) {
  return weights ? weights[c] : 1.0f;
}

// W = sum over counted rows of w[y_i] in row order; 0 when every row is ignored.
__device__ double weight_total(const int32_t* labels, const float* weights, int64_t B) {
  double total = 0.0;
  for (int64_t i = 0; i < B; ++i)
    if (labels[i] >= 0) total += class_weight(weights, labels[i]);
  return total;
}

// __launch_bounds__: launched with kForwardThreads = 1024 threads, so at most 64 registers per
// thread fit a block's 64 K registers. Unbounded, ptxas gives this kernel (double exp / log) 66
// registers for sm_90 and 72 for sm_120, and every launch failed with "too many resources
// requested for launch".
__global__ void __launch_bounds__(kForwardThreads)
    cross_entropy_forward_kernel(float* loss, float* probs, const float* logits,
                                 const int32_t* labels, const float* weights, float eps, int64_t B,
                                 int64_t K) {
  __shared__ double warp_nll[32], warp_smooth[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  double nll = 0.0, smooth = 0.0;  // meaningful in lane 0
  for (int64_t i = warp; i < B; i += warps) {
    const float* z = logits + i * K;
    float* p = probs + i * K;
    float mx = -INFINITY;
    for (int64_t c = lane; c < K; c += 32) mx = fmaxf(mx, z[c]);
    mx = warp_max(mx);
    double sum = 0.0;
    for (int64_t c = lane; c < K; c += 32) sum += exp(static_cast<double>(z[c] - mx));
    sum = warp_sum(sum);
    const double log_sum = log(sum);
    for (int64_t c = lane; c < K; c += 32) p[c] = static_cast<float>(exp(z[c] - mx - log_sum));
    if (labels[i] < 0) continue;  // the same for the whole warp
    double row_smooth = 0.0;
    for (int64_t c = lane; c < K; c += 32)
      row_smooth += class_weight(weights, c) * (z[c] - mx - log_sum);
    row_smooth = warp_sum(row_smooth);
    if (lane == 0) {
      nll -= class_weight(weights, labels[i]) * (z[labels[i]] - mx - log_sum);
      smooth -= row_smooth;
    }
  }
  if (lane == 0) {
    warp_nll[warp] = nll;
    warp_smooth[warp] = smooth;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total_nll = 0.0, total_smooth = 0.0;
  for (int w = 0; w < warps; ++w) {
    total_nll += warp_nll[w];
    total_smooth += warp_smooth[w];
  }
  const double W = weight_total(labels, weights, B);
  // PyTorch returns NaN when nothing is counted (0 / 0); so does this.
  loss[0] = static_cast<float>((1.0 - eps) * total_nll / W + eps / K * total_smooth / W);
}

__global__ void cross_entropy_backward_kernel(float* dlogits, const float* probs,
                                              const int32_t* labels, const float* weights,
                                              float eps, float dloss, const float* dloss_at,
                                              int64_t B, int64_t K) {
  if (dloss_at) dloss *= *dloss_at;
  __shared__ double shared_W, shared_sum_w;
  if (threadIdx.x == 0) {
    shared_W = weight_total(labels, weights, B);
    double sum_w = 0.0;
    for (int64_t c = 0; c < K; ++c) sum_w += class_weight(weights, c);
    shared_sum_w = sum_w;
  }
  __syncthreads();
  const double W = shared_W, sum_w = shared_sum_w;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < B * K;
       idx += stride) {
    const int64_t i = idx / K, c = idx % K;
    if (labels[i] < 0 || W == 0.0) {
      dlogits[idx] = 0.0f;
      continue;
    }
    const float p = probs[idx];
    const double wy = class_weight(weights, labels[i]);
    const double hard = wy * (p - (c == labels[i] ? 1.0 : 0.0));
    const double soft = p * sum_w - class_weight(weights, c);
    dlogits[idx] = static_cast<float>(dloss * ((1.0 - eps) * hard + eps / K * soft) / W);
  }
}

}  // namespace

void cross_entropy_forward(float* loss, float* probs, const float* logits, const int32_t* labels,
                           const float* weights, float eps, int64_t B, int64_t K) {
  cross_entropy_forward_kernel<<<1, kForwardThreads, 0, compute_stream()>>>(loss, probs, logits, labels, weights, eps, B,
                                                       K);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void cross_entropy_backward(float* dlogits, const float* probs, const int32_t* labels,
                            const float* weights, float eps, float dloss, const float* dloss_at,
                            int64_t B, int64_t K) {
  if (B * K == 0) return;
  cross_entropy_backward_kernel<<<grid_stride_blocks(B * K, 256), 256, 0, compute_stream()>>>(dlogits, probs, labels,
                                                                         weights, eps, dloss, dloss_at, B, K);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
