// MarginMSE on the CPU: groups in order, sums in double (margin_mse_loss.h for the math).
#include "ops/margin_mse_loss.h"

namespace ftune::cpu {
namespace {

int64_t counted_groups(const int32_t* labels, int64_t N, int64_t group_size) {
  int64_t n = 0;
  for (int64_t p = 0; p < N; p += group_size) n += labels[p] >= 0 ? 1 : 0;
  return n;
}

}  // namespace

void margin_mse_loss_forward(float* loss, float* residual, const float* logits,
                             const float* teacher, const int32_t* labels, int64_t N,
                             int64_t group_size) {
  double sum = 0.0;
  for (int64_t p = 0; p < N; p += group_size) {
    residual[p] = 0.0f;
    for (int64_t i = p + 1; i < p + group_size; ++i) {
      const float r = (logits[p] - logits[i]) - (teacher[p] - teacher[i]);
      residual[i] = r;
      if (labels[p] >= 0) sum += double(r) * double(r);
    }
  }
  const double n = double(counted_groups(labels, N, group_size)) * double(group_size - 1);
  loss[0] = static_cast<float>(sum / n);  // NaN when no group is counted, as PyTorch's empty mean
}

void margin_mse_loss_backward(float* dlogits, const float* residual, const int32_t* labels,
                              float dloss, int64_t N, int64_t group_size) {
  const double n = double(counted_groups(labels, N, group_size)) * double(group_size - 1);
  for (int64_t p = 0; p < N; p += group_size) {
    const bool counted = labels[p] >= 0 && n > 0;
    double positive = 0.0;
    for (int64_t i = p + 1; i < p + group_size; ++i) {
      dlogits[i] = counted ? static_cast<float>(-2.0 * dloss * residual[i] / n) : 0.0f;
      positive += residual[i];
    }
    dlogits[p] = counted ? static_cast<float>(2.0 * dloss * positive / n) : 0.0f;
  }
}

}  // namespace ftune::cpu
