// The end of every BERT sublayer, fused: LayerNorm(dropout(h) + x), one pass instead of three
// (dropout, residual add, layer norm), and its backward: the layer norm's input gradient and the
// dropout's gradient of it in one pass.
//   forward:  sum (N, C) = dropout(a) + b, written (backward needs it); out = LayerNorm(sum) with
//             mean and rstd saved, and out_h its 16-bit copy when given (layer_norm.h).
//             a (N, C) f32, bf16 or f16 (a sublayer's output; not modified); the dropped value is
//             rounded to a's type before the add, as dropout_forward would have stored it; b, sum
//             and out f32.
//   backward: dinp (N, C) f32 = the layer norm's input gradient (the gradient of sum: of b, through
//             the residual), overwritten; ddrop (N, C) = dropout_backward(dinp): the gradient of
//             a, of ddrop's own float type, overwritten; dweight, dbias += (parameter gradients
//             accumulate), undefined for a frozen LayerNorm.
// Both give exactly the bits of the composition dropout_forward -> residual_forward ->
// layer_norm_forward (and layer_norm_backward -> dropout_backward) on every device, for every
// shape: the CPU composes the same per-element operations, and the CUDA twin runs them in the
// layer norm's own row kernels (ops/layer_norm_cuda.cu), drawing each element's mask from the
// same Philox stream index (ops/dropout.h: rows map a row of the (N, C) tensor to its sequence
// and position). p = 0 (evaluation) skips the masks.
#pragma once

#include "core/philox.h"
#include "core/tensor.h"
#include "ops/dropout.h"

namespace ftune {

void dropout_add_layer_norm_forward(TensorView out, TensorView out_h, TensorView sum,
                                    TensorView mean, TensorView rstd, TensorView a, TensorView b,
                                    TensorView weight, TensorView bias, float eps, float p,
                                    RngKey rng, const DropoutRows& rows);
void layer_norm_dropout_backward(TensorView dinp, TensorView ddrop, TensorView dweight,
                                 TensorView dbias, TensorView dout, TensorView inp,
                                 TensorView weight, TensorView mean, TensorView rstd, float p,
                                 RngKey rng, const DropoutRows& rows);

namespace cpu {
void dropout_add_layer_norm_forward(float* out, float* mean, float* rstd, const void* a,
                                    DType a_type, const float* b, float* sum, const float* weight,
                                    const float* bias, int64_t N, int64_t C, float eps,
                                    bf16_t* out_bf16, f16_t* out_f16, float p, RngKey rng,
                                    DropoutRuns runs);
void layer_norm_dropout_backward(float* dinp, void* ddrop, DType ddrop_type, float* dweight,
                                 float* dbias, const float* dout, const float* inp,
                                 const float* weight, const float* mean, const float* rstd,
                                 int64_t N, int64_t C, float p, RngKey rng, DropoutRuns runs);
}  // namespace cpu

namespace cuda {  // in ops/layer_norm_cuda.cu, on the layer norm's kernels
void dropout_add_layer_norm_forward(float* out, float* mean, float* rstd, const void* a,
                                    DType a_type, const float* b, float* sum, const float* weight,
                                    const float* bias, int64_t N, int64_t C, float eps,
                                    bf16_t* out_bf16, f16_t* out_f16, float p, RngKey rng,
                                    DropoutRuns runs);
void layer_norm_dropout_backward(float* dinp, void* ddrop, DType ddrop_type, float* dweight,
                                 float* dbias, const float* dout, const float* inp,
                                 const float* weight, const float* mean, const float* rstd,
                                 int64_t N, int64_t C, float p, RngKey rng, DropoutRuns runs);
}  // namespace cuda

}  // namespace ftune
