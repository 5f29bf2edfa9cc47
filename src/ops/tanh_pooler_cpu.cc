// Tanh and its derivative on the CPU (the pooler's GEMM is the linear op's).
#include <cmath>

#include "ops/tanh_pooler.h"

namespace ftune::cpu {

void tanh_inplace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
}

void tanh_backward(float* dpre, const float* dout, const float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dpre[i] = dout[i] * (1.0f - out[i] * out[i]);
}

}  // namespace ftune::cpu
