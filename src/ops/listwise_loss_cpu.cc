// Listwise loss on the CPU: groups in order, each softmax and cross-entropy in double
// (ops/listwise_loss.h for the math).
#include <algorithm>
#include <cmath>

#include "ops/listwise_loss.h"

namespace ftune::cpu {
namespace {

double row_score(const float* logits, int64_t i, int64_t K) {
  return K == 1 ? logits[i] : static_cast<double>(logits[2 * i + 1]) - logits[2 * i];
}

double group_relevance(const float* relevance, int32_t begin, int32_t end) {
  double sum = 0.0;
  for (int32_t i = begin; i < end; ++i) sum += relevance[i];
  return sum;
}

// G' = the groups with a relevant row.
int64_t counted_groups(const float* relevance, const int32_t* offsets, int64_t G) {
  int64_t n = 0;
  for (int64_t g = 0; g < G; ++g)
    if (group_relevance(relevance, offsets[g], offsets[g + 1]) > 0.0) ++n;
  return n;
}

}  // namespace

void listwise_loss_forward(float* loss, float* probs, const float* logits, const float* relevance,
                           const int32_t* offsets, int64_t G, int64_t K) {
  double total = 0.0;
  for (int64_t g = 0; g < G; ++g) {
    const int32_t begin = offsets[g], end = offsets[g + 1];
    if (begin == end) continue;
    double mx = -INFINITY;
    for (int32_t i = begin; i < end; ++i) mx = std::max(mx, row_score(logits, i, K));
    double sum = 0.0;
    for (int32_t i = begin; i < end; ++i) sum += std::exp(row_score(logits, i, K) - mx);
    const double log_sum = std::log(sum);
    for (int32_t i = begin; i < end; ++i)
      probs[i] = static_cast<float>(std::exp(row_score(logits, i, K) - mx - log_sum));
    const double rel = group_relevance(relevance, begin, end);
    if (rel <= 0.0) continue;
    for (int32_t i = begin; i < end; ++i)
      if (relevance[i] > 0.0f)
        total -= relevance[i] / rel * (row_score(logits, i, K) - mx - log_sum);
  }
  loss[0] = static_cast<float>(total / static_cast<double>(counted_groups(relevance, offsets, G)));
}

void listwise_loss_backward(float* dlogits, const float* probs, const float* relevance,
                            const int32_t* offsets, float dloss, int64_t G, int64_t K) {
  const double counted = static_cast<double>(counted_groups(relevance, offsets, G));
  for (int64_t g = 0; g < G; ++g) {
    const int32_t begin = offsets[g], end = offsets[g + 1];
    const double rel = group_relevance(relevance, begin, end);
    for (int32_t i = begin; i < end; ++i) {
      const double ds = rel > 0.0 ? dloss * (probs[i] - relevance[i] / rel) / counted : 0.0;
      if (K == 1) {
        dlogits[i] = static_cast<float>(ds);
      } else {
        dlogits[2 * i] = static_cast<float>(-ds);
        dlogits[2 * i + 1] = static_cast<float>(ds);
      }
    }
  }
}

}  // namespace ftune::cpu
