// Element types of tensors and their bit-exact conversions. bf16 and f16 are stored as raw 16-bit
// patterns; conversion from f32 rounds to nearest even, as PyTorch, safetensors writers and CUDA's
// __float2bfloat16 / __float2half do, so a tensor converted here matches one converted there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "core/host_device.h"

namespace ftune {

enum class DType : uint8_t { F32, BF16, F16, I32, I64, U8 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "bf16", ...

// Raw 16-bit float patterns; distinct types so a bf16 buffer is never read as f16 by mistake.
struct bf16_t {
  uint16_t bits;
};
struct f16_t {
  uint16_t bits;
};

// Maps a C++ element type to its DType (used by TensorView::data_as<T>() to check access).
template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct dtype_of<bf16_t> {
  static constexpr DType value = DType::BF16;
};
template <>
struct dtype_of<f16_t> {
  static constexpr DType value = DType::F16;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::I32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::I64;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::U8;
};

FTUNE_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

FTUNE_HD float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

FTUNE_HD float bf16_to_float(bf16_t h) {
  return bits_float(static_cast<uint32_t>(h.bits) << 16);
}

// Round to nearest even; NaN stays a quiet NaN with its sign.
FTUNE_HD bf16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_t{static_cast<uint16_t>(u >> 16)};
}

// IEEE half: 1 sign, 5 exponent (bias 15), 10 mantissa bits; subnormals and infinities exact.
FTUNE_HD float f16_to_float(f16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);  // signed zero
    // Subnormal: value = mant * 2^-24; renormalise into an f32 normal.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return bits_float(sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (mant << 13));
  }
  return bits_float(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

FTUNE_HD f16_t float_to_f16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16_t{static_cast<uint16_t>(sign | 0x7e00u)};   // nan
  if (abs >= 0x477ff000u) return f16_t{static_cast<uint16_t>(sign | 0x7c00u)};  // rounds to inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero) in f16: value / 2^-24, rounded to nearest even.
    if (abs < 0x33000000u) return f16_t{sign};  // below half the smallest subnormal
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14..24 for this range
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return f16_t{static_cast<uint16_t>(sign | half)};
  }
  // Normal: rebias the exponent and round the mantissa from 23 to 10 bits (nearest even).
  uint32_t v = abs - ((127u - 15u) << 23);
  v += 0xfffu + ((v >> 13) & 1u);
  return f16_t{static_cast<uint16_t>(sign | (v >> 13))};
}

}  // namespace ftune
