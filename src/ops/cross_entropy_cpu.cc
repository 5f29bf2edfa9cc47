// Cross-entropy on the CPU (B rows of K logits: small, serial, accumulated in double).
#include <algorithm>
#include <cmath>

#include "ops/cross_entropy.h"

namespace ftune::cpu {
namespace {

float class_weight(const float* weights, int64_t c) {
  return weights ? weights[c] : 1.0f;
}

// W = sum over counted rows of w[y_i]; 0 when every row is ignored.
double weight_total(const int32_t* labels, const float* weights, int64_t B) {
  double total = 0.0;
  for (int64_t i = 0; i < B; ++i)
    if (labels[i] >= 0) total += class_weight(weights, labels[i]);
  return total;
}

}  // namespace

void cross_entropy_forward(float* loss, float* probs, const float* logits, const int32_t* labels,
                           const float* weights, float eps, int64_t B, int64_t K) {
  double nll = 0.0, smooth = 0.0;
  for (int64_t i = 0; i < B; ++i) {
    const float* z = logits + i * K;
    float* p = probs + i * K;
    const float mx = *std::max_element(z, z + K);
    double sum = 0.0;
    for (int64_t c = 0; c < K; ++c) sum += std::exp(static_cast<double>(z[c] - mx));
    const double log_sum = std::log(sum);
    for (int64_t c = 0; c < K; ++c) p[c] = static_cast<float>(std::exp(z[c] - mx - log_sum));
    if (labels[i] < 0) continue;
    nll -= class_weight(weights, labels[i]) * (z[labels[i]] - mx - log_sum);
    for (int64_t c = 0; c < K; ++c) smooth -= class_weight(weights, c) * (z[c] - mx - log_sum);
  }
  const double W = weight_total(labels, weights, B);
  // PyTorch returns NaN when nothing is counted (0 / 0); so does this.
  loss[0] = static_cast<float>((1.0 - eps) * nll / W + eps / K * smooth / W);
}

void cross_entropy_backward(float* dlogits, const float* probs, const int32_t* labels,
                            const float* weights, float eps, float dloss, int64_t B, int64_t K) {
  const double W = weight_total(labels, weights, B);
  double sum_w = 0.0;
  for (int64_t c = 0; c < K; ++c) sum_w += class_weight(weights, c);
  for (int64_t i = 0; i < B; ++i) {
    const float* p = probs + i * K;
    float* g = dlogits + i * K;
    if (labels[i] < 0 || W == 0.0) {
      std::fill(g, g + K, 0.0f);
      continue;
    }
    const double wy = class_weight(weights, labels[i]);
    for (int64_t c = 0; c < K; ++c) {
      const double hard = wy * (p[c] - (c == labels[i] ? 1.0 : 0.0));
      const double soft = p[c] * sum_w - class_weight(weights, c);
      g[c] = static_cast<float>(dloss * ((1.0 - eps) * hard + eps / K * soft) / W);
    }
  }
}

}  // namespace ftune::cpu
