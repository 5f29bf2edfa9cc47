// Loads and stores of one element of a floating-point storage type (float, bf16_t, f16_t) as fp32
// in device code: kernels templated on the storage type compute in fp32 and round once when they
// store (round to nearest even, core/dtype.h: the same bits as __float2bfloat16 / __float2half,
// and no architecture-specific intrinsics, so the same code builds for every sm_80+ target).
// Include only from .cu files.
#pragma once

#include "core/dtype.h"

namespace ftune::cuda {

__device__ __forceinline__ float load_f32(const float* p) {
  return *p;
}
__device__ __forceinline__ float load_f32(const bf16_t* p) {
  return __uint_as_float(static_cast<uint32_t>(p->bits) << 16);
}
__device__ __forceinline__ float load_f32(const f16_t* p) {
  return f16_to_float(*p);
}

__device__ __forceinline__ void store_f32(float* p, float v) {
  *p = v;
}
__device__ __forceinline__ void store_f32(bf16_t* p, float v) {
  *p = float_to_bf16(v);
}
__device__ __forceinline__ void store_f32(f16_t* p, float v) {
  *p = float_to_f16(v);
}

// Calls fn(T*) with p cast to the storage type of dtype (F32, BF16 or F16).
template <typename Fn>
void with_float_type(DType dtype, void* p, Fn fn) {
  switch (dtype) {
    case DType::F32:
      fn(static_cast<float*>(p));
      return;
    case DType::BF16:
      fn(static_cast<bf16_t*>(p));
      return;
    case DType::F16:
      fn(static_cast<f16_t*>(p));
      return;
    default:
      break;
  }
  throw ShapeError("CUDA kernel: not a floating-point storage type");
}

}  // namespace ftune::cuda
