// The fused dropout + residual + layer norm on the CPU: the composition's own per-element
// operations (ops/dropout_add_norm.h), rows split across threads, so it gives the composition's
// bits.
#include "core/thread_pool.h"
#include "ops/cast.h"
#include "ops/dropout_add_norm.h"
#include "ops/layer_norm.h"

namespace ftune::cpu {
namespace {

float load_as_f32(const void* p, DType t, int64_t i) {
  if (t == DType::BF16) return bf16_to_float(static_cast<const bf16_t*>(p)[i]);
  if (t == DType::F16) return f16_to_float(static_cast<const f16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

// v as a store of type t would keep it.
float rounded(DType t, float v) {
  if (t == DType::BF16) return bf16_to_float(float_to_bf16(v));
  if (t == DType::F16) return f16_to_float(float_to_f16(v));
  return v;
}

void store_as(void* p, DType t, int64_t i, float v) {
  if (t == DType::BF16)
    static_cast<bf16_t*>(p)[i] = float_to_bf16(v);
  else if (t == DType::F16)
    static_cast<f16_t*>(p)[i] = float_to_f16(v);
  else
    static_cast<float*>(p)[i] = v;
}

constexpr int kMaskSlot = kStagingSlots - 1;  // a row's multipliers (thread-local staging)

// f(r, m) for every row r of an (N, C) tensor, rows split across threads, m the row's C dropout
// multipliers (null when p = 0: nothing dropped).
template <typename F>
void for_rows_with_mask(int64_t N, int64_t C, float p, const RngKey& rng, const DropoutRuns& runs,
                        const F& f) {
  parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        float* m = p > 0.0f ? staging(kMaskSlot, C) : nullptr;
        for (int64_t r = r0; r < r1; ++r) {
          if (m) dropout_multipliers(m, rng, dropout_stream_index(runs, r * C), C, p);
          f(r, m);
        }
      },
      8);
}

}  // namespace

void dropout_add_layer_norm_forward(float* out, float* mean, float* rstd, const void* a,
                                    DType a_type, const float* b, float* sum, const float* weight,
                                    const float* bias, int64_t N, int64_t C, float eps,
                                    bf16_t* out_bf16, f16_t* out_f16, float p, RngKey rng,
                                    DropoutRuns runs) {
  resolve_micro(rng, runs);
  if (p == 0.0f && a_type == DType::F32) {  // scoring: the residual add alone, in one SIMD loop
    layer_norm_forward(out, mean, rstd, nullptr, static_cast<const float*>(a), b, sum, weight,
                       bias, N, C, eps, out_bf16, out_f16);
    return;
  }
  // sum = dropout(a) + b: the dropped value rounded to a's type (dropout_forward's store), then
  // the residual add in fp32.
  for_rows_with_mask(N, C, p, rng, runs, [&](int64_t r, const float* m) {
    if (a_type == DType::F32 && m) {  // the same operations, in a loop the compiler vectorises
      const float* ar = static_cast<const float*>(a) + r * C;
      const float* br = b + r * C;
      float* sr = sum + r * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) sr[c] = ar[c] * m[c] + br[c];
      return;
    }
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = r * C + c;
      float x = load_as_f32(a, a_type, i);
      if (m) x = rounded(a_type, x * m[c]);
      sum[i] = x + b[i];
    }
  });
  layer_norm_forward(out, mean, rstd, sum, nullptr, nullptr, nullptr, weight, bias, N, C, eps,
                     out_bf16, out_f16);
}

void layer_norm_dropout_backward(float* dinp, void* ddrop, DType ddrop_type, float* dweight,
                                 float* dbias, const float* dout, const float* inp,
                                 const float* weight, const float* mean, const float* rstd,
                                 int64_t N, int64_t C, float p, RngKey rng, DropoutRuns runs) {
  layer_norm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  resolve_micro(rng, runs);
  // ddrop = dropout_backward(dinp): from the stored fp32 dinp, one rounding to ddrop's type.
  for_rows_with_mask(N, C, p, rng, runs, [&](int64_t r, const float* m) {
    if (ddrop_type == DType::F32 && m) {  // the same operations, vectorised
      float* dr = static_cast<float*>(ddrop) + r * C;
      const float* gr = dinp + r * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dr[c] = gr[c] * m[c];
      return;
    }
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = r * C + c;
      store_as(ddrop, ddrop_type, i, m ? dinp[i] * m[c] : dinp[i]);
    }
  });
}

}  // namespace ftune::cpu
