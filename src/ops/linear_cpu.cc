// Linear layer on the CPU: three GEMMs (ops/primitives_cpu.h); the bias is folded into the forward
// GEMM by starting from broadcast bias rows with beta = 1. Inside a FrozenWeightsScope (scoring)
// the forward product runs on weights packed once, the bias fused (ops/cpu_matmul.h).
#include "core/thread_pool.h"
#include "ops/cpu_matmul.h"
#include "ops/linear.h"
#include "ops/primitives_cpu.h"

namespace ftune::cpu {

void linear_forward(float* out, int64_t ldo, const float* inp, int64_t ldi, const float* weight,
                    const float* bias, int64_t N, int64_t C, int64_t OC) {
  if (PackedWeights* packed = frozen_weights())
    if (packed->linear(out, ldo, inp, ldi, weight, bias, N, C, OC)) return;
  if (bias) {
    parallel_for(
        N,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t o = 0; o < OC; ++o) out[r * ldo + o] = bias[o];
        },
        16);
  }
  // out (N, OC) = inp (N, C) @ weight^T (C, OC) [+ out]
  gemm(false, true, N, OC, C, 1.0f, inp, ldi, weight, C, bias ? 1.0f : 0.0f, out, ldo);
}

void linear_backward(float* dinp, int64_t lddi, float* dweight, float* dbias, const float* dout,
                     int64_t lddo, const float* inp, int64_t ldi, const float* weight, int64_t N,
                     int64_t C, int64_t OC, bool accumulate_dinp) {
  // dinp (N, C) = dout (N, OC) @ weight (OC, C)
  if (dinp)
    gemm(false, false, N, C, OC, 1.0f, dout, lddo, weight, C, accumulate_dinp ? 1.0f : 0.0f, dinp,
         lddi);
  // dweight (OC, C) += dout^T (OC, N) @ inp (N, C)
  if (dweight) gemm(true, false, OC, C, N, 1.0f, dout, lddo, inp, ldi, 1.0f, dweight, C);
  if (dbias) {
    if (lddo == OC) {
      add_column_sums(dbias, dout, N, OC);
    } else {
      for (int64_t r = 0; r < N; ++r)
        for (int64_t o = 0; o < OC; ++o) dbias[o] += dout[r * lddo + o];
    }
  }
}

}  // namespace ftune::cpu
