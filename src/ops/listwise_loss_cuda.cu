// Listwise loss on CUDA; mirrors ops/listwise_loss_cpu.cc (same formulas in double; see
// listwise_loss.h for the math). A micro-batch holds a few hundred groups of a few rows, so
// both passes run in ONE block: thread t takes groups t, t + T, ... serially (softmax, its
// cross-entropy term); the per-thread sums are added in thread order by thread 0, so the loss does
// not depend on scheduling, and no second launch or host round trip is needed.
#include <cmath>

#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "ops/listwise_loss.h"

namespace ftune::cuda {
namespace {

constexpr unsigned kThreads = 256;

__device__ inline double row_score(const float* logits, int64_t i, int64_t K) {
  return K == 1 ? logits[i] : static_cast<double>(logits[2 * i + 1]) - logits[2 * i];
}

__device__ inline int64_t begin_of(const ListwiseGroups& q, int64_t g) {
  return q.offsets ? q.offsets[g] : g * q.group_size;
}

__device__ inline double relevance_of(const ListwiseGroups& q, int64_t i) {
  return q.relevance ? q.relevance[i] : max(q.labels[i], 0);
}

__device__ double group_relevance(const ListwiseGroups& q, int64_t begin, int64_t end) {
  double sum = 0.0;
  for (int64_t i = begin; i < end; ++i) sum += relevance_of(q, i);
  return sum;
}

// G' (the groups with a relevant row), counted by every thread's share and summed in shared
// memory by thread 0.
__device__ double counted_groups(const ListwiseGroups& q, int64_t G, double* shared) {
  double n = 0.0;
  for (int64_t g = threadIdx.x; g < G; g += blockDim.x)
    if (group_relevance(q, begin_of(q, g), begin_of(q, g + 1)) > 0.0) n += 1.0;
  shared[threadIdx.x] = n;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (unsigned t = 0; t < blockDim.x; ++t) total += shared[t];
    shared[0] = total;
  }
  __syncthreads();
  const double total = shared[0];
  __syncthreads();
  return total;
}

__global__ void __launch_bounds__(kThreads)
    listwise_forward_kernel(float* loss, float* probs, const float* logits, ListwiseGroups q,
                            int64_t G, int64_t K) {
  __shared__ double shared[kThreads];
  double mine = 0.0;
  for (int64_t g = threadIdx.x; g < G; g += blockDim.x) {
    const int64_t begin = begin_of(q, g), end = begin_of(q, g + 1);
    if (begin == end) continue;
    double mx = -INFINITY;
    for (int64_t i = begin; i < end; ++i) mx = fmax(mx, row_score(logits, i, K));
    double sum = 0.0;
    for (int64_t i = begin; i < end; ++i) sum += exp(row_score(logits, i, K) - mx);
    const double log_sum = log(sum);
    for (int64_t i = begin; i < end; ++i)
      probs[i] = static_cast<float>(exp(row_score(logits, i, K) - mx - log_sum));
    const double rel = group_relevance(q, begin, end);
    if (rel <= 0.0) continue;
    for (int64_t i = begin; i < end; ++i)
      if (relevance_of(q, i) > 0.0)
        mine -= relevance_of(q, i) / rel * (row_score(logits, i, K) - mx - log_sum);
  }
  const double counted = counted_groups(q, G, shared);
  shared[threadIdx.x] = mine;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0.0;
  for (unsigned t = 0; t < blockDim.x; ++t) total += shared[t];
  loss[0] = static_cast<float>(total / counted);  // NaN when no group is counted, as on the CPU
}

__global__ void __launch_bounds__(kThreads)
    listwise_backward_kernel(float* dlogits, const float* probs, ListwiseGroups q, float dloss,
                             const float* dloss_at, int64_t G, int64_t K) {
  __shared__ double shared[kThreads];
  if (dloss_at) dloss *= *dloss_at;
  const double counted = counted_groups(q, G, shared);
  for (int64_t g = threadIdx.x; g < G; g += blockDim.x) {
    const int64_t begin = begin_of(q, g), end = begin_of(q, g + 1);
    const double rel = group_relevance(q, begin, end);
    for (int64_t i = begin; i < end; ++i) {
      const double ds = rel > 0.0 ? dloss * (probs[i] - relevance_of(q, i) / rel) / counted : 0.0;
      if (K == 1) {
        dlogits[i] = static_cast<float>(ds);
      } else {
        dlogits[2 * i] = static_cast<float>(-ds);
        dlogits[2 * i + 1] = static_cast<float>(ds);
      }
    }
  }
}

}  // namespace

void listwise_loss_forward(float* loss, float* probs, const float* logits,
                           const ListwiseGroups& groups, int64_t G, int64_t K) {
  listwise_forward_kernel<<<1, kThreads, 0, compute_stream()>>>(loss, probs, logits, groups, G, K);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void listwise_loss_backward(float* dlogits, const float* probs, const ListwiseGroups& groups,
                            float dloss, const float* dloss_at, int64_t G, int64_t K) {
  if (G == 0) return;
  listwise_backward_kernel<<<1, kThreads, 0, compute_stream()>>>(dlogits, probs, groups, dloss,
                                                                 dloss_at, G, K);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
