// Vectorised loads and stores for the elementwise kernels: V consecutive elements of a float
// storage type (float, bf16_t, f16_t) moved as 128-bit (uint4) or 64-bit (uint2) accesses and
// converted to / from fp32 in registers, element by element with load_f32 / store_f32
// (cuda/element.cuh). A kernel that uses them computes each element exactly as its scalar twin
// does, so the two give the same bits; only the memory transactions differ (one ld.global.v4 for
// four floats or eight bf16 values instead of four or eight scalar loads).
// The caller checks alignment (aligned16 on every pointer, on the host) and keeps the element
// index a multiple of V; elements past the last whole vector go through the scalar path.
// Include only from .cu files.
#pragma once

#include <cstdint>

#include "cuda/element.cuh"

namespace ftune::cuda {

// True when p is 16-byte aligned (arena buffers always are; offset views may not be).
inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}
template <typename... P>
bool all_aligned16(const P*... p) {
  return (aligned16(p) && ...);
}

namespace vec_detail {

// Element j of a 32-bit word holding 4 / sizeof(T) elements (little-endian: element 0 in the low
// bits), as fp32.
__device__ __forceinline__ float unpack(uint32_t w, int, const float*) {
  return __uint_as_float(w);
}
__device__ __forceinline__ float unpack(uint32_t w, int j, const bf16_t*) {
  return __uint_as_float(j == 0 ? w << 16 : w & 0xffff0000u);
}
__device__ __forceinline__ float unpack(uint32_t w, int j, const f16_t*) {
  return f16_to_float(f16_t{static_cast<uint16_t>(j == 0 ? w & 0xffffu : w >> 16)});
}

// The word holding e[0 .. 4 / sizeof(T)) rounded to T.
__device__ __forceinline__ uint32_t pack(const float* e, float*) {
  return __float_as_uint(e[0]);
}
__device__ __forceinline__ uint32_t pack(const float* e, bf16_t*) {
  return static_cast<uint32_t>(float_to_bf16(e[0]).bits) |
         (static_cast<uint32_t>(float_to_bf16(e[1]).bits) << 16);
}
__device__ __forceinline__ uint32_t pack(const float* e, f16_t*) {
  return static_cast<uint32_t>(float_to_f16(e[0]).bits) |
         (static_cast<uint32_t>(float_to_f16(e[1]).bits) << 16);
}

}  // namespace vec_detail

// v[0 .. V) = p[0 .. V) as fp32. V * sizeof(T): 8 (one 64-bit load) or a multiple of 16 (128-bit
// loads), p aligned to that access; or V = 1, a plain scalar load.
template <int V, typename T>
__device__ __forceinline__ void load_vec(const T* p, float (&v)[V]) {
  constexpr int kBytes = V * static_cast<int>(sizeof(T)), kPerWord = 4 / static_cast<int>(sizeof(T));
  static_assert(V == 1 || kBytes == 8 || kBytes % 16 == 0,
                "load_vec: one element, or 64-bit or whole 128-bit accesses");
  if constexpr (V == 1) {
    v[0] = load_f32(p);
  } else if constexpr (kBytes == 8) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    const uint32_t w[2] = {u.x, u.y};
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
      for (int j = 0; j < kPerWord; ++j)
        v[q * kPerWord + j] = vec_detail::unpack(w[q], j, static_cast<const T*>(nullptr));
  } else {
#pragma unroll
    for (int k = 0; k < kBytes / 16; ++k) {
      const uint4 u = reinterpret_cast<const uint4*>(p)[k];
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int j = 0; j < kPerWord; ++j)
          v[(k * 4 + q) * kPerWord + j] =
              vec_detail::unpack(w[q], j, static_cast<const T*>(nullptr));
    }
  }
}

// p[0 .. V) = v[0 .. V) rounded to T (nearest even), the same bits as V store_f32 calls.
template <int V, typename T>
__device__ __forceinline__ void store_vec(T* p, const float (&v)[V]) {
  constexpr int kBytes = V * static_cast<int>(sizeof(T)), kPerWord = 4 / static_cast<int>(sizeof(T));
  static_assert(V == 1 || kBytes == 8 || kBytes % 16 == 0,
                "store_vec: one element, or 64-bit or whole 128-bit accesses");
  if constexpr (V == 1) {
    store_f32(p, v[0]);
  } else if constexpr (kBytes == 8) {
    *reinterpret_cast<uint2*>(p) = make_uint2(vec_detail::pack(v, static_cast<T*>(nullptr)),
                                              vec_detail::pack(v + kPerWord, static_cast<T*>(nullptr)));
  } else {
#pragma unroll
    for (int k = 0; k < kBytes / 16; ++k) {
      const float* e = v + k * 4 * kPerWord;
      reinterpret_cast<uint4*>(p)[k] = make_uint4(
          vec_detail::pack(e, static_cast<T*>(nullptr)),
          vec_detail::pack(e + kPerWord, static_cast<T*>(nullptr)),
          vec_detail::pack(e + 2 * kPerWord, static_cast<T*>(nullptr)),
          vec_detail::pack(e + 3 * kPerWord, static_cast<T*>(nullptr)));
    }
  }
}

// Elements per thread of a vectorised elementwise kernel over tensors of types T...: the widest
// type fills one 128-bit access, the narrower ones a 64-bit or 128-bit one (fp32 alone: 4; any
// 16-bit type involved: 8, i.e. two float4 for the fp32 tensors and one uint4 for the 16-bit ones).
template <typename... T>
constexpr int vec_width() {
  return ((sizeof(T) == 2) || ...) ? 8 : 4;
}

}  // namespace ftune::cuda
