// Element type conversion between floating-point storage types (f32 <-> bf16 / f16), and the
// CPU's fp32 staging of 16-bit tensors.
//   cast(out, inp): out = inp converted, rounding to nearest even (core/dtype.h) when narrowing.
// Mixed precision (autocast semantics, train/precision.h) uses it for the bf16 copy of each
// LayerNorm output that feeds the next GEMM and for the bf16 shadow of the weights written after
// every optimizer step.
//
// CPU emulation of 16-bit storage: the CPU has no bf16 arithmetic, so an op given 16-bit tensors
// converts them to fp32 scratch (exact), computes in fp32 with the fp32 kernel, and rounds the
// results back to the 16-bit output (once, as a GPU kernel does when it stores). This is the GPU's
// numerics (16-bit storage, fp32 compute and accumulation), slower. The scratch is thread-local
// and growable: it grows on the first step to the largest tensor seen and is reused afterwards,
// so the step loop does not allocate after its first step.
#pragma once

#include "core/tensor.h"

namespace ftune {

// out and inp: same shape, contiguous, each f32, bf16 or f16 (any pair, same type is a copy);
// or both 2-D with a contiguous inner dimension and their own row strides (a column block of the
// fused QKV matrix).
void cast(TensorView out, TensorView inp);

namespace cpu {
// Converts n elements from one float storage type to another.
void cast(void* out, DType out_type, const void* inp, DType inp_type, int64_t n);
// Thread-local fp32 scratch slot `slot` (0 .. kStagingSlots - 1) of at least n floats.
constexpr int kStagingSlots = 8;
float* staging(int slot, int64_t n);
// A (rows, cols) matrix with row stride ld as fp32: its own data when it is f32, else a contiguous
// copy in staging slot `slot` (row stride cols). *ld_out receives the row stride to use.
const float* stage_f32(const void* data, DType dtype, int64_t rows, int64_t cols, int64_t ld,
                       int slot, int64_t* ld_out);
// Writes a contiguous fp32 (rows, cols) matrix into `data` (row stride ld) of type dtype.
void store_f32(void* data, DType dtype, const float* src, int64_t rows, int64_t cols, int64_t ld);
}  // namespace cpu

namespace cuda {
void cast(void* out, DType out_type, const void* inp, DType inp_type, int64_t n);
// (rows, cols) with row strides ldo and ldi.
void cast_2d(void* out, DType out_type, int64_t ldo, const void* inp, DType inp_type, int64_t ldi,
             int64_t rows, int64_t cols);
}  // namespace cuda

}  // namespace ftune
