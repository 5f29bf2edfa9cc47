// GELU and its derivative, shared by the CPU and CUDA kernels so both compute the same formula.
#pragma once

#include <cmath>

#include "core/host_device.h"
#include "ops/gelu.h"

namespace ftune {

constexpr float kSqrtHalf = 0.70710678118654752440f;     // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;   // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286535588f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

FTUNE_HD float gelu_value(float x, GeluForm form) {
  if (form == GeluForm::Erf) return 0.5f * x * (1.0f + erff(x * kSqrtHalf));
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

FTUNE_HD float gelu_grad(float x, GeluForm form) {
  if (form == GeluForm::Erf)
    return 0.5f * (1.0f + erff(x * kSqrtHalf)) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  const float t = tanhf(u);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
}

}  // namespace ftune
