// GELU and its derivative, shared by the CPU and CUDA kernels so both compute the same formula.
// CUDA uses its erff / expf / tanhf; the CPU uses ops/fast_math.h so that the loops vectorise.
#pragma once

#include <cmath>

#include "core/host_device.h"
#include "ops/fast_math.h"
#include "ops/gelu.h"

namespace ftune {

constexpr float kSqrtHalf = 0.70710678118654752440f;     // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;   // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286535588f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

#if defined(__CUDA_ARCH__)
FTUNE_HD float gelu_erf(float x) {
  return erff(x);
}
FTUNE_HD float gelu_exp(float x) {
  return expf(x);
}
#else
FTUNE_HD float gelu_erf(float x) {
  return fast_erf(x);
}
FTUNE_HD float gelu_exp(float x) {
  return fast_exp(x);
}
#endif
// tanh(u) = 1 - 2 / (e^{2u} + 1), exact at both ends (e^{2u} saturates to 0 or a large value).
FTUNE_HD float gelu_tanh(float u) {
  return 1.0f - 2.0f / (gelu_exp(2.0f * u) + 1.0f);
}

FTUNE_HD float gelu_value(float x, GeluForm form) {
  if (form == GeluForm::Erf) return 0.5f * x * (1.0f + gelu_erf(x * kSqrtHalf));
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + gelu_tanh(u));
}

FTUNE_HD float gelu_grad(float x, GeluForm form) {
  if (form == GeluForm::Erf)
    return 0.5f * (1.0f + gelu_erf(x * kSqrtHalf)) + x * kInvSqrt2Pi * gelu_exp(-0.5f * x * x);
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  const float t = gelu_tanh(u);
  return 0.5f * (1.0f + t) +
         0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
}

}  // namespace ftune
