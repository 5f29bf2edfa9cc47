// Last-token pooling on the CPU (ops/last_token.h).
#include <cstring>

#include "ops/last_token.h"

namespace ftune::cpu {

void last_token_index(int32_t* index, const int32_t* ids, const int32_t* cu, int64_t B, int64_t T,
                      int64_t pad_id) {
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = cu ? cu[b] : b * T, end = cu ? cu[b + 1] : (b + 1) * T;
    int64_t pick = end > start ? end - 1 : start;
    if (pad_id >= 0) {
      pick = start;  // a row of pad ids only
      for (int64_t t = end - 1; t >= start; --t)
        if (ids[t] != pad_id) {
          pick = t;
          break;
        }
    }
    index[b] = static_cast<int32_t>(pick);
  }
}

void gather_rows(float* out, const float* hidden, const int32_t* index, int64_t B, int64_t C) {
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(out + b * C, hidden + static_cast<int64_t>(index[b]) * C, C * sizeof(float));
}

void scatter_rows(float* dhidden, const float* dout, const int32_t* index, int64_t N, int64_t B,
                  int64_t C) {
  std::memset(dhidden, 0, static_cast<size_t>(N * C) * sizeof(float));
  for (int64_t b = 0; b < B; ++b) {
    float* d = dhidden + static_cast<int64_t>(index[b]) * C;
    for (int64_t c = 0; c < C; ++c) d[c] += dout[b * C + c];
  }
}

}  // namespace ftune::cpu
