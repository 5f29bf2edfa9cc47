// Binary cross-entropy with logits on the CPU (B rows of K scores: small, serial, summed in double;
// see bce_with_logits.h for the math).
#include <algorithm>
#include <cmath>

#include "ops/bce_with_logits.h"

namespace ftune::cpu {
namespace {

bool counted(const int32_t* labels, int64_t i) {
  return !labels || labels[i] >= 0;
}

int64_t counted_rows(const int32_t* labels, int64_t B) {
  int64_t n = 0;
  for (int64_t i = 0; i < B; ++i) n += counted(labels, i) ? 1 : 0;
  return n;
}

}  // namespace

void bce_with_logits_forward(float* loss, float* probs, const float* logits, const float* targets,
                             const int32_t* labels, int64_t B, int64_t K) {
  double sum = 0.0;
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t c = 0; c < K; ++c) {
      const double z = logits[i * K + c], t = targets[i * K + c];
      probs[i * K + c] = static_cast<float>(1.0 / (1.0 + std::exp(-z)));
      // The stable form: never exp of a large positive number.
      if (counted(labels, i)) sum += std::max(z, 0.0) - z * t + std::log1p(std::exp(-std::fabs(z)));
    }
  }
  // PyTorch returns NaN when nothing is counted (0 / 0); so does this.
  loss[0] = static_cast<float>(sum / (double(counted_rows(labels, B)) * double(K)));
}

void bce_with_logits_backward(float* dlogits, const float* probs, const float* targets,
                              const int32_t* labels, float dloss, int64_t B, int64_t K) {
  const double n = double(counted_rows(labels, B)) * double(K);
  for (int64_t i = 0; i < B; ++i)
    for (int64_t c = 0; c < K; ++c) {
      const int64_t at = i * K + c;
      dlogits[at] = counted(labels, i) && n > 0
                        ? static_cast<float>(dloss * (double(probs[at]) - targets[at]) / n)
                        : 0.0f;
    }
}

}  // namespace ftune::cpu
