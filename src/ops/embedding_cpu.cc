// Embedding on the CPU: forward split over tokens, backward split over columns (deterministic).
#include "core/thread_pool.h"
#include "ops/embedding.h"

namespace ftune::cpu {

void embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int64_t C,
                       bool accumulate) {
  parallel_for(
      N,
      [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n) {
          const float* row = table + static_cast<int64_t>(ids[n]) * C;
          float* o = out + n * C;
          if (accumulate)
            for (int64_t c = 0; c < C; ++c) o[c] += row[c];
          else
            for (int64_t c = 0; c < C; ++c) o[c] = row[c];
        }
      },
      16);
}

void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C,
                        int64_t padding_idx) {
  parallel_for(
      C,
      [&](int64_t c0, int64_t c1) {
        for (int64_t n = 0; n < N; ++n) {
          if (ids[n] == padding_idx) continue;
          float* row = dtable + static_cast<int64_t>(ids[n]) * C;
          const float* g = dout + n * C;
          for (int64_t c = c0; c < c1; ++c) row[c] += g[c];
        }
      },
      32);
}

}  // namespace ftune::cpu
