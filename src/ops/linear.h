// Linear layer with bias, weights stored (out_features, in_features) as in PyTorch.
//   forward:  out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC)
//   backward: dinp (N, C) = dout @ weight        (overwritten, or added with accumulate_dinp)
//             dweight (OC, C) += dout^T @ inp    (parameter gradients accumulate)
//             dbias (OC) += sum over rows of dout
// Inputs may be row-strided 2-D views (e.g. the first token of every sequence); the innermost
// dimension must be contiguous. accumulate_dinp lets a layer whose input also feeds a residual
// path add its gradient to the one already there, without another pass.
//
// Mixed precision (autocast): weight, inp and dout may be bf16 (or f16), all of one type — the
// weight then being the 16-bit shadow of the fp32 master — with out and dinp either that type or
// f32 (an fp32 residual-stream gradient accumulates the GEMM's fp32 result directly). bias is f32,
// or, with a 16-bit out, that 16-bit type (the bias's shadow, as autocast casts a bias: what
// cuBLASLt's fused bias epilogue takes for a 16-bit output). dbias and dweight stay f32: dweight
// accumulates (+=) the fp32 product of 16-bit operands, dbias the fp32 column sums of the 16-bit
// dout. CUDA runs these through cuBLASLt (cuda/gemm.h, fp32 compute), the bias gradient reduced
// inside the weight gradient's GEMM where cuBLASLt can (else by the column reduction of
// cuda/column_reduce.cuh); the CPU emulates them with fp32 staging (ops/cast.h).
#pragma once

#include "core/tensor.h"

namespace ftune {

void linear_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias);
void linear_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                     TensorView inp, TensorView weight, bool accumulate_dinp = false);

namespace cpu {
void linear_forward(float* out, int64_t ldo, const float* inp, int64_t ldi, const float* weight,
                    const float* bias, int64_t N, int64_t C, int64_t OC);
void linear_backward(float* dinp, int64_t lddi, float* dweight, float* dbias, const float* dout,
                     int64_t lddo, const float* inp, int64_t ldi, const float* weight, int64_t N,
                     int64_t C, int64_t OC, bool accumulate_dinp);
}  // namespace cpu

namespace cuda {
// 16-bit operands (dtype bf16 or f16): inp, weight and dout of `dtype`, out and dinp of their own
// type (dtype or f32); bias f32 or out's 16-bit type (bias_type); dweight and dbias f32.
void linear_forward_mixed(void* out, DType out_type, int64_t ldo, const void* inp, int64_t ldi,
                          const void* weight, DType dtype, const void* bias, DType bias_type,
                          int64_t N, int64_t C, int64_t OC);
void linear_backward_mixed(void* dinp, DType dinp_type, int64_t lddi, float* dweight, float* dbias,
                           const void* dout, int64_t lddo, const void* inp, int64_t ldi,
                           const void* weight, DType dtype, int64_t N, int64_t C, int64_t OC,
                           bool accumulate_dinp);
void linear_forward(float* out, int64_t ldo, const float* inp, int64_t ldi, const float* weight,
                    const float* bias, int64_t N, int64_t C, int64_t OC);
void linear_backward(float* dinp, int64_t lddi, float* dweight, float* dbias, const float* dout,
                     int64_t lddo, const float* inp, int64_t ldi, const float* weight, int64_t N,
                     int64_t C, int64_t OC, bool accumulate_dinp);
}  // namespace cuda

}  // namespace ftune
