// First-token selection on the CPU.
#include <cstring>

#include "core/thread_pool.h"
#include "ops/first_token.h"

namespace ftune::cpu {

void first_token_forward(float* out, const float* hidden, int64_t B, int64_t T, int64_t C) {
  for (int64_t b = 0; b < B; ++b) std::memcpy(out + b * C, hidden + b * T * C, C * sizeof(float));
}

void first_token_backward(float* dhidden, const float* dout, int64_t B, int64_t T, int64_t C) {
  parallel_for(B, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float* seq = dhidden + b * T * C;
      std::memcpy(seq, dout + b * C, C * sizeof(float));
      std::memset(seq + C, 0, (T - 1) * C * sizeof(float));
    }
  });
}

}  // namespace ftune::cpu
