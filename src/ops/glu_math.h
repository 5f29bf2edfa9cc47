// The gated activations of ops/glu.h and their derivatives, shared by the CPU and CUDA kernels.
#pragma once

#include "ops/gelu_math.h"
#include "ops/glu.h"

namespace ftune {

FTUNE_HD float glu_sigmoid(float x) {
  return 1.0f / (1.0f + gelu_exp(-x));
}

FTUNE_HD float glu_act_value(float x, GluAct act) {
  if (act == GluAct::Silu) return x * glu_sigmoid(x);
  return gelu_value(x, act == GluAct::GeluTanh ? GeluForm::Tanh : GeluForm::Erf);
}

FTUNE_HD float glu_act_grad(float x, GluAct act) {
  if (act == GluAct::Silu) {
    const float s = glu_sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
  }
  return gelu_grad(x, act == GluAct::GeluTanh ? GeluForm::Tanh : GeluForm::Erf);
}

}  // namespace ftune
