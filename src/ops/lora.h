// Low-rank adapters on a frozen linear layer, as PEFT computes them (peft/tuners/lora).
//
// LoRA, with x_d = dropout(x) (Philox key `rng`, rate p, stream indices from `rows` with x read
// as N = B*T tokens of C values (ops/dropout.h); x_d is rebuilt in `scratch` (N, C) when p > 0,
// never stored) and s the scaling (alpha / r, or alpha / sqrt(r) for rsLoRA):
//   forward:  u (N, r) = x_d A^T ;  out (N, OC) += s * u B^T        (out holds the frozen x W^T +
//   b) backward: dB (OC, r) += s * dout^T u
//             h  (N, r)   = s * dout B                                (scratch)
//             dA (r, C)  += h^T x_d
//             dinp (N, C) = dropout'(h A)   (or += with accumulate_dinp)
// DoRA (Liu et al. 2024, PEFT's lora/dora.py): with the per-output-row norm
//   n_o = || W_o + s (B A)_o ||_2, treated as a constant in backward (PEFT detaches it),
//   z = x W^T + s u B^T and y = b + (m / n) * z (column-wise). Like PEFT without dropout, z starts
//   from the frozen layer's result minus its bias (dora_strip_bias), then lora_forward adds s u
//   B^T: dora_norms:            n from cached ||W_o||^2 and low-rank cross terms, never forming W +
//   sBA:
//                          n_o^2 = ||W_o||^2 + 2 s B_o . (W A^T)_o + s^2 B_o (A A^T) B_o^T
//   dora_output_forward:   y = b + (m / n) * z
//   dora_output_backward:  dm += colsum(dout * z) / n ;  dout *= m / n   (in place: the gradient
//                          that then flows through x W^T and the LoRA branch, as g above)
// DoRA with adapter dropout (PEFT's DoRA variant in training mode with lora_dropout not the
// identity): the frozen layer keeps its result on the whole input, base = x W^T + b, and only the
// adapter's terms read x_d = dropout(x):
//   y = base + (m/n - 1) * x_d W^T + (m/n) * s * x_d A^T B^T
// The caller forms z = x_d W^T + s u B^T (u = x_d A^T: a second frozen GEMM, on x_d) and
// y = base + s u B^T; then
//   dora_dropout_output_forward:   y += (m/n - 1) * z
//   dora_dropout_output_backward:  dm += colsum(dout * z) / n ;  z := k = (m/n - 1) * dout
//                                  (dout unchanged: the frozen layer's gradient is dout W)
// and the input gradient is dx = dout W + dropout'(k W + s (g B) A) with g = k + dout, A and B's
// gradients those of the LoRA branch under g (lora_backward is linear in dout: once with k, once
// with dout).
// Gradient rule: parameter gradients accumulate (+=), activation gradients overwrite (=) unless
// accumulate_dinp. `out`, `dout`, `dinp`, `inp` and `z` may be row-strided 2-D views (a part of
// the fused QKV matrix); A, B, m, n, bias are contiguous.
#pragma once

#include "core/philox.h"
#include "core/tensor.h"
#include "ops/dropout.h"

namespace ftune {

struct LoraDropout {
  float p = 0.0f;
  RngKey rng;
  TensorView scratch;  // (N, C) f32, needed when p > 0
  DropoutRows rows;    // the stream index of each element of x (default: flat)
};

void lora_forward(TensorView out, TensorView u, TensorView inp, TensorView a, TensorView b,
                  float scale, const LoraDropout& dropout = {});
void lora_backward(TensorView dinp, TensorView da, TensorView db, TensorView h, TensorView dout,
                   TensorView inp, TensorView u, TensorView a, TensorView b, float scale,
                   bool accumulate_dinp, const LoraDropout& dropout = {});

// wsq (OC) = squared L2 norm of every row of w (OC, C): the cache dora_norms reads.
void row_sq_norms(TensorView wsq, TensorView w);
// norm (OC) = || W_o + s (B A)_o ||; workspace holds at least dora_norms_workspace(OC, r) floats.
void dora_norms(TensorView norm, TensorView wsq, TensorView w, TensorView a, TensorView b,
                float scale, TensorView workspace);
int64_t dora_norms_workspace(int64_t OC, int64_t r);
// z (N, OC) = out - bias.
void dora_strip_bias(TensorView z, TensorView out, TensorView bias);
void dora_output_forward(TensorView out, TensorView z, TensorView bias, TensorView magnitude,
                         TensorView norm);
void dora_output_backward(TensorView dmagnitude, TensorView dout, TensorView z,
                          TensorView magnitude, TensorView norm);
void dora_dropout_output_forward(TensorView out, TensorView z, TensorView magnitude,
                                 TensorView norm);
void dora_dropout_output_backward(TensorView dmagnitude, TensorView z, TensorView dout,
                                  TensorView magnitude, TensorView norm);

namespace cpu {
// With p > 0, inp is replaced by dropout(inp) rebuilt in `scratch` (N, C contiguous).
void lora_forward(float* out, int64_t ldo, float* u, const float* inp, int64_t ldi, const float* a,
                  const float* b, int64_t N, int64_t C, int64_t OC, int64_t r, float scale, float p,
                  RngKey rng, DropoutRuns runs, float* scratch);
void lora_backward(float* dinp, int64_t lddi, float* da, float* db, float* h, const float* dout,
                   int64_t lddo, const float* inp, int64_t ldi, const float* u, const float* a,
                   const float* b, int64_t N, int64_t C, int64_t OC, int64_t r, float scale,
                   bool accumulate_dinp, float p, RngKey rng, DropoutRuns runs, float* scratch);
void dora_strip_bias(float* z, int64_t ldz, const float* out, int64_t ldo, const float* bias,
                     int64_t N, int64_t OC);
void row_sq_norms(float* wsq, const float* w, int64_t OC, int64_t C);
void dora_norms(float* norm, const float* wsq, const float* w, const float* a, const float* b,
                int64_t OC, int64_t C, int64_t r, float scale, float* workspace);
void dora_output_forward(float* out, int64_t ldo, const float* z, int64_t ldz, const float* bias,
                         const float* m, const float* norm, int64_t N, int64_t OC);
void dora_output_backward(float* dm, float* dout, int64_t lddo, const float* z, int64_t ldz,
                          const float* m, const float* norm, int64_t N, int64_t OC);
void dora_dropout_output_forward(float* out, int64_t ldo, const float* z, int64_t ldz,
                                 const float* m, const float* norm, int64_t N, int64_t OC);
void dora_dropout_output_backward(float* dm, float* z, int64_t ldz, const float* dout,
                                  int64_t lddo, const float* m, const float* norm, int64_t N,
                                  int64_t OC);
}  // namespace cpu

namespace cuda {
// With p > 0, inp is replaced by dropout(inp) rebuilt in `scratch` (N, C contiguous).
void lora_forward(float* out, int64_t ldo, float* u, const float* inp, int64_t ldi, const float* a,
                  const float* b, int64_t N, int64_t C, int64_t OC, int64_t r, float scale, float p,
                  RngKey rng, DropoutRuns runs, float* scratch);
void lora_backward(float* dinp, int64_t lddi, float* da, float* db, float* h, const float* dout,
                   int64_t lddo, const float* inp, int64_t ldi, const float* u, const float* a,
                   const float* b, int64_t N, int64_t C, int64_t OC, int64_t r, float scale,
                   bool accumulate_dinp, float p, RngKey rng, DropoutRuns runs, float* scratch);
void dora_strip_bias(float* z, int64_t ldz, const float* out, int64_t ldo, const float* bias,
                     int64_t N, int64_t OC);
void row_sq_norms(float* wsq, const float* w, int64_t OC, int64_t C);
void dora_norms(float* norm, const float* wsq, const float* w, const float* a, const float* b,
                int64_t OC, int64_t C, int64_t r, float scale, float* workspace);
void dora_output_forward(float* out, int64_t ldo, const float* z, int64_t ldz, const float* bias,
                         const float* m, const float* norm, int64_t N, int64_t OC);
void dora_output_backward(float* dm, float* dout, int64_t lddo, const float* z, int64_t ldz,
                          const float* m, const float* norm, int64_t N, int64_t OC);
void dora_dropout_output_forward(float* out, int64_t ldo, const float* z, int64_t ldz,
                                 const float* m, const float* norm, int64_t N, int64_t OC);
void dora_dropout_output_backward(float* dm, float* z, int64_t ldz, const float* dout,
                                  int64_t lddo, const float* m, const float* norm, int64_t N,
                                  int64_t OC);
}  // namespace cuda

}  // namespace ftune
