// Mean pooling on the CPU: rows split across threads, each row's sum over its tokens in order.
#include "core/thread_pool.h"
#include "ops/mean_pool.h"

namespace ftune::cpu {
namespace {

// Row b's tokens [first, last) and its real-token count.
void row_span(const int32_t* mask, const int32_t* cu, int64_t b, int64_t T, int64_t* first,
              int64_t* last, int64_t* count) {
  *first = cu ? cu[b] : b * T;
  *last = cu ? cu[b + 1] : (b + 1) * T;
  *count = cu ? *last - *first : 0;
  if (!cu)
    for (int64_t t = *first; t < *last; ++t) *count += mask[t] != 0;
}

}  // namespace

void mean_pool_forward(float* out, const float* hidden, const int32_t* mask, const int32_t* cu,
                       int64_t B, int64_t T, int64_t C) {
  parallel_for(B, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t first, last, count;
      row_span(mask, cu, b, T, &first, &last, &count);
      float* o = out + b * C;
      for (int64_t c = 0; c < C; ++c) o[c] = 0.0f;
      for (int64_t t = first; t < last; ++t)
        if (cu || mask[t])
          for (int64_t c = 0; c < C; ++c) o[c] += hidden[t * C + c];
      const float n = static_cast<float>(count);
      for (int64_t c = 0; c < C; ++c) o[c] = count > 0 ? o[c] / n : 0.0f;
    }
  });
}

void mean_pool_backward(float* dhidden, const float* dout, const int32_t* mask, const int32_t* cu,
                        int64_t B, int64_t T, int64_t C) {
  parallel_for(B, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t first, last, count;
      row_span(mask, cu, b, T, &first, &last, &count);
      const float n = static_cast<float>(count);
      for (int64_t t = first; t < last; ++t)
        for (int64_t c = 0; c < C; ++c)
          dhidden[t * C + c] = (cu || mask[t]) ? dout[b * C + c] / n : 0.0f;
    }
  });
}

}  // namespace ftune::cpu
