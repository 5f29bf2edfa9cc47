// Layer normalisation over the last dimension, and its fusion with the residual add that precedes
// every LayerNorm in BERT (LayerNorm(dropout(dense(h)) + x)).
//   forward:  mean, rstd (N) saved; out (N, C) = (inp - mean) * rstd * weight + bias; optionally
//             out_h (N, C), a bf16 / f16 copy of out rounded to nearest even, written by the same
//             pass (mixed precision: the next GEMM's input, the same bits as cast(out_h, out))
//   fused:    sum (N, C) = a + b is written (backward needs it), then out = LayerNorm(sum)
//   backward: dinp (N, C) overwritten; dweight, dbias (C) accumulate (+=); both undefined for a
//             frozen LayerNorm (adapters), which then only computes dinp.
// bias may be undefined (a LayerNorm without bias, ModernBERT's norm_bias false): out has no
// "+ bias", and its backward takes dweight with an undefined dbias.
// The fused op's backward is layer_norm_backward on `sum`: its dinp is the gradient of a and b.
// dweight and dbias are column sums in the fixed order of core/column_order.h on both devices:
// the same bits for any thread count, and no workspace.
#pragma once

#include "core/tensor.h"

namespace ftune {

void layer_norm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp,
                        TensorView weight, TensorView bias, float eps,
                        TensorView out_h = TensorView());
void add_layer_norm_forward(TensorView out, TensorView sum, TensorView mean, TensorView rstd,
                            TensorView a, TensorView b, TensorView weight, TensorView bias,
                            float eps);
void layer_norm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                         TensorView inp, TensorView weight, TensorView mean, TensorView rstd);

namespace cpu {
// inp, or a + b into sum (the fused add); out_bf16 / out_f16: null, or out's 16-bit copy.
void layer_norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* a,
                        const float* b, float* sum, const float* weight, const float* bias,
                        int64_t N, int64_t C, float eps, bf16_t* out_bf16 = nullptr,
                        f16_t* out_f16 = nullptr);
void layer_norm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                         const float* inp, const float* weight, const float* mean,
                         const float* rstd, int64_t N, int64_t C);
}  // namespace cpu

namespace cuda {
// inp, or a + b into sum (the fused add); out_bf16 / out_f16: null, or out's 16-bit copy.
void layer_norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* a,
                        const float* b, float* sum, const float* weight, const float* bias,
                        int64_t N, int64_t C, float eps, bf16_t* out_bf16 = nullptr,
                        f16_t* out_f16 = nullptr);
void layer_norm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                         const float* inp, const float* weight, const float* mean,
                         const float* rstd, int64_t N, int64_t C);
}  // namespace cuda

}  // namespace ftune
