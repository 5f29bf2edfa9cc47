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

int64_t begin_of(const ListwiseGroups& q, int64_t g) {
  return q.offsets ? q.offsets[g] : g * q.group_size;
}

double relevance_of(const ListwiseGroups& q, int64_t i) {
  return q.relevance ? q.relevance[i] : std::max(q.labels[i], 0);
}

double group_relevance(const ListwiseGroups& q, int64_t begin, int64_t end) {
  double sum = 0.0;
  for (int64_t i = begin; i < end; ++i) sum += relevance_of(q, i);
  return sum;
}

// G' = the groups with a relevant row.
int64_t counted_groups(const ListwiseGroups& q, int64_t G) {
  int64_t n = 0;
  for (int64_t g = 0; g < G; ++g)
    if (group_relevance(q, begin_of(q, g), begin_of(q, g + 1)) > 0.0) ++n;
  return n;
}

}  // namespace

void listwise_loss_forward(float* loss, float* probs, const float* logits, const ListwiseGroups& q,
                           int64_t G, int64_t K) {
  double total = 0.0;
  for (int64_t g = 0; g < G; ++g) {
    const int64_t begin = begin_of(q, g), end = begin_of(q, g + 1);
    if (begin == end) continue;
    double mx = -INFINITY;
    for (int64_t i = begin; i < end; ++i) mx = std::max(mx, row_score(logits, i, K));
    double sum = 0.0;
    for (int64_t i = begin; i < end; ++i) sum += std::exp(row_score(logits, i, K) - mx);
    const double log_sum = std::log(sum);
    for (int64_t i = begin; i < end; ++i)
      probs[i] = static_cast<float>(std::exp(row_score(logits, i, K) - mx - log_sum));
    const double rel = group_relevance(q, begin, end);
    if (rel <= 0.0) continue;
    for (int64_t i = begin; i < end; ++i)
      if (relevance_of(q, i) > 0.0)
        total -= relevance_of(q, i) / rel * (row_score(logits, i, K) - mx - log_sum);
  }
  loss[0] = static_cast<float>(total / static_cast<double>(counted_groups(q, G)));
}

void listwise_loss_backward(float* dlogits, const float* probs, const ListwiseGroups& q,
                            float dloss, int64_t G, int64_t K) {
  const double counted = static_cast<double>(counted_groups(q, G));
  for (int64_t g = 0; g < G; ++g) {
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

}  // namespace ftune::cpu
