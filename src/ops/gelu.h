// GELU activation in its two forms: exact (erf; HF "gelu") and the tanh approximation
// (HF "gelu_new", "gelu_fast", "gelu_pytorch_tanh").
//   erf:  y = 0.5 x (1 + erf(x / sqrt 2))
//   tanh: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   backward: dinp = dout * y'(inp)   (overwritten)
// Tensors are f32, or all bf16 (or all f16) under mixed precision: fp32 math, one rounding on the
// store (ops/cast.h for the CPU's emulation).
#pragma once

#include <string>

#include "core/tensor.h"

namespace ftune {

enum class GeluForm : uint8_t { Erf, Tanh };

// Maps an HF `hidden_act` to a GELU form; throws InputError naming `key` for anything else.
GeluForm gelu_form_from_hf(const std::string& hidden_act, const std::string& key);

void gelu_forward(TensorView out, TensorView inp, GeluForm form);
void gelu_backward(TensorView dinp, TensorView inp, TensorView dout, GeluForm form);

namespace cpu {
void gelu_forward(float* out, const float* inp, int64_t n, GeluForm form);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, GeluForm form);
}  // namespace cpu

namespace cuda {
void gelu_forward(float* out, const float* inp, int64_t n, GeluForm form);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, GeluForm form);
// 16-bit storage (dtype bf16 or f16) for every tensor.
void gelu_forward_16(void* out, const void* inp, DType dtype, int64_t n, GeluForm form);
void gelu_backward_16(void* dinp, const void* inp, const void* dout, DType dtype, int64_t n,
                      GeluForm form);
}  // namespace cuda

}  // namespace ftune
