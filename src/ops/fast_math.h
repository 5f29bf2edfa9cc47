// exp and erf for the CPU kernels, written so that the compiler vectorises loops that call them
// (libm's expf / erff are scalar calls: GELU over an (N, 4C) activation spent ~10% of a training
// step in erff). Both are branch-free: a clamp, a range reduction and a polynomial or rational
// function in plain arithmetic.
//   fast_exp: |rel error| < 4e-7 on [-87, 88]; 0 below (no denormals), as expf saturates above.
//   fast_erf: |abs error| < 4e-7 on the whole line (rational fit of erf(x)/x in x^2 on [0, 4],
//             fitted for ftune with numpy; erf(4) = 1 - 1.5e-8, so the clamp costs nothing).
// tests/ops/fast_math_test.cc checks both against libm on dense grids.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace ftune {

FTUNE_HD float fast_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln 2 split so that n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;  // |r| <= ln(2) / 2
  // e^r by its Taylor series to r^7 (relative error < 2e-8 on the reduced range).
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // Multiply by 2^n through the exponent bits (n in [-126, 127] after the clamp).
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof(scale));
  return x < -87.0f ? 0.0f : p * scale;
}

FTUNE_HD float fast_erf(float x) {
  const float a = x < 0.0f ? -x : x;
  const float t = a > 4.0f ? 4.0f : a;
  const float t2 = t * t;
  float p = 2.0157884e-06f;
  p = p * t2 + 2.8603492e-04f;
  p = p * t2 + 3.8632641e-03f;
  p = p * t2 + 5.3036660e-02f;
  p = p * t2 + 1.9281690e-01f;
  p = p * t2 + 1.1283790e+00f;
  float q = 3.7801667e-05f;
  q = q * t2 + 1.1845049e-03f;
  q = q * t2 + 1.5161885e-02f;
  q = q * t2 + 1.1507859e-01f;
  q = q * t2 + 5.0421137e-01f;
  q = q * t2 + 1.0f;
  const float r = t * p / q;
  const float e = r > 1.0f ? 1.0f : r;
  return x < 0.0f ? -e : e;
}

}  // namespace ftune
