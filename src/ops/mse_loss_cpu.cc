// Mean squared error on the CPU (B rows of K scores: small, serial, summed in double; see
// mse_loss.h for the math).
#include "ops/mse_loss.h"

namespace ftune::cpu {
namespace {

bool row_counted(const int32_t* labels, int64_t i) {
  return !labels || labels[i] >= 0;
}

int64_t rows_counted(const int32_t* labels, int64_t B) {
  int64_t n = 0;
  for (int64_t i = 0; i < B; ++i) n += row_counted(labels, i) ? 1 : 0;
  return n;
}

}  // namespace

void mse_loss_forward(float* loss, float* residual, const float* logits, const float* targets,
                      const int32_t* labels, int64_t B, int64_t K) {
  double sum = 0.0;
  for (int64_t i = 0; i < B; ++i)
    for (int64_t c = 0; c < K; ++c) {
      const float r = logits[i * K + c] - targets[i * K + c];
      residual[i * K + c] = r;
      if (row_counted(labels, i)) sum += double(r) * double(r);
    }
  // PyTorch returns NaN when nothing is counted (0 / 0); so does this.
  loss[0] = static_cast<float>(sum / (double(rows_counted(labels, B)) * double(K)));
}

void mse_loss_backward(float* dlogits, const float* residual, const int32_t* labels, float dloss,
                       int64_t B, int64_t K) {
  const double n = double(rows_counted(labels, B)) * double(K);
  for (int64_t i = 0; i < B; ++i)
    for (int64_t c = 0; c < K; ++c) {
      const int64_t at = i * K + c;
      dlogits[at] = row_counted(labels, i) && n > 0
                        ? static_cast<float>(dloss * 2.0 * double(residual[at]) / n)
                        : 0.0f;
    }
}

}  // namespace ftune::cpu
