// Embedding on the CPU: forward split over tokens (an f32 or 16-bit table, widened exactly); backward in the order of additions of
// ops/embedding.h (sorted by id, pieces per window of 64 entries), split over columns.
#include <algorithm>

#include "core/thread_pool.h"
#include "ops/embedding.h"

namespace ftune::cpu {

namespace {

inline float widen(float v) { return v; }
inline float widen(bf16_t v) { return bf16_to_float(v); }
inline float widen(f16_t v) { return f16_to_float(v); }

// T: the table's storage type; each element widened exactly to f32.
template <typename T>
void forward(float* out, const int32_t* ids, const T* table, int64_t N, int64_t C,
             bool accumulate) {
  parallel_for(
      N,
      [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n) {
          const T* row = table + static_cast<int64_t>(ids[n]) * C;
          float* o = out + n * C;
          if (accumulate)
            for (int64_t c = 0; c < C; ++c) o[c] += widen(row[c]);
          else
            for (int64_t c = 0; c < C; ++c) o[c] = widen(row[c]);
        }
      },
      16);
}

}  // namespace

void embedding_forward(float* out, const int32_t* ids, const void* table, DType table_dtype,
                       int64_t N, int64_t C, bool accumulate) {
  switch (table_dtype) {
    case DType::F32:
      return forward(out, ids, static_cast<const float*>(table), N, C, accumulate);
    case DType::BF16:
      return forward(out, ids, static_cast<const bf16_t*>(table), N, C, accumulate);
    case DType::F16:
      return forward(out, ids, static_cast<const f16_t*>(table), N, C, accumulate);
    default:
      throw ShapeError("embedding_forward: the table must be f32, bf16 or f16");
  }
}

void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C,
                        int64_t padding_idx, int64_t* order) {
  // The order of additions of ops/embedding.h. Sorting (id, token) pairs, which are all distinct,
  // keeps the tokens of one id in token order.
  for (int64_t n = 0; n < N; ++n) order[n] = (int64_t{ids[n]} << 32) | n;
  std::sort(order, order + N);
  const auto id_at = [&](int64_t p) { return static_cast<int32_t>(order[p] >> 32); };
  const auto token_at = [&](int64_t p) { return order[p] & 0xffffffff; };
  constexpr int64_t kColumns = 256;  // a piece's sums, a block of columns at a time
  parallel_for(
      (C + kColumns - 1) / kColumns,
      [&](int64_t b0, int64_t b1) {
        float acc[kColumns];
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t c0 = b * kColumns, w = std::min(kColumns, C - c0);
          for (int64_t w0 = 0; w0 < N; w0 += kEmbeddingWindow) {
            const int64_t w1 = std::min(N, w0 + kEmbeddingWindow);
            for (int64_t p = w0; p < w1;) {  // a piece: entries [p, q) of one id in the window
              const int32_t id = id_at(p);
              int64_t q = p;
              while (q < w1 && id_at(q) == id) ++q;
              if (id != padding_idx) {
                for (int64_t i = 0; i < w; ++i) acc[i] = 0.0f;
                for (int64_t e = p; e < q; ++e) {
                  const float* g = dout + token_at(e) * C + c0;
                  for (int64_t i = 0; i < w; ++i) acc[i] += g[i];
                }
                float* row = dtable + static_cast<int64_t>(id) * C + c0;
                for (int64_t i = 0; i < w; ++i) row[i] += acc[i];
              }
              p = q;
            }
          }
        }
      },
      1);
}

}  // namespace ftune::cpu
