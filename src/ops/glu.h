// Gated feed-forward activation of Llama / Mistral / Qwen (SwiGLU: act = silu) and Gemma (GeGLU:
// act = gelu_pytorch_tanh), between the fused gate|up projection and the down projection:
//   gu (N, 2F) = [gate | up] (the gate_proj and up_proj outputs side by side)
//   forward:  out (N, F) = act(gate) * up
//   backward: dgu (N, 2F) = [dout * up * act'(gate) | dout * act(gate)]   (overwritten)
// silu(x) = x sigmoid(x), silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x))); the GELU forms as in
// ops/gelu.h. Contiguous tensors: gu and out (gu and dgu) of one type, f32 or 16-bit (bf16 / f16:
// fp32 math on the loaded values, one rounding on the store, the same bits as casting gu to f32,
// running the f32 op and casting the result); dout f32 or gu's type.
#pragma once

#include <string>

#include "core/tensor.h"

namespace ftune {

enum class GluAct : uint8_t { Silu, GeluTanh, GeluErf };

// An HF `hidden_act` / `hidden_activation` ("silu", "swish", "gelu_pytorch_tanh", "gelu_new",
// "gelu_fast", "gelu"); InputError naming `key` for anything else.
GluAct glu_act_from_hf(const std::string& name, const std::string& key);

void glu_forward(TensorView out, TensorView gu, GluAct act);
void glu_backward(TensorView dgu, TensorView gu, TensorView dout, GluAct act);

namespace cpu {
void glu_forward(float* out, const float* gu, int64_t N, int64_t F, GluAct act);
void glu_backward(float* dgu, const float* gu, const float* dout, int64_t N, int64_t F, GluAct act);
}  // namespace cpu

namespace cuda {
void glu_forward(float* out, const float* gu, int64_t N, int64_t F, GluAct act);
void glu_backward(float* dgu, const float* gu, const float* dout, int64_t N, int64_t F, GluAct act);
// 16-bit storage: out, gu and dgu of `dtype` (bf16 or f16); dout of dout_dtype (f32 or dtype).
void glu_forward_16(void* out, const void* gu, DType dtype, int64_t N, int64_t F, GluAct act);
void glu_backward_16(void* dgu, const void* gu, const void* dout, DType dtype, DType dout_dtype,
                     int64_t N, int64_t F, GluAct act);
}  // namespace cuda

}  // namespace ftune
