// Gated feed-forward activation of Llama / Mistral / Qwen (SwiGLU: act = silu) and Gemma (GeGLU:
// act = gelu_pytorch_tanh), between the fused gate|up projection and the down projection:
//   gu (N, 2F) = [gate | up] (the gate_proj and up_proj outputs side by side)
//   forward:  out (N, F) = act(gate) * up
//   backward: dgu (N, 2F) = [dout * up * act'(gate) | dout * act(gate)]   (overwritten)
// silu(x) = x sigmoid(x), silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x))); the GELU forms as in
// ops/gelu.h. f32 tensors, contiguous (16-bit ones through fp32 staging: the *_staged forms).
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
// Mixed precision: gu and out / dgu of a 16-bit type (dout f32), computed by the fp32 op on
// copies in stage0 and stage1 (f32, at least N x 2F elements each) and rounded once; f32 tensors
// run the op directly.
void glu_forward_staged(TensorView out, TensorView gu, GluAct act, TensorView stage0,
                        TensorView stage1);
void glu_backward_staged(TensorView dgu, TensorView gu, TensorView dout, GluAct act,
                         TensorView stage0, TensorView stage1);

namespace cpu {
void glu_forward(float* out, const float* gu, int64_t N, int64_t F, GluAct act);
void glu_backward(float* dgu, const float* gu, const float* dout, int64_t N, int64_t F, GluAct act);
}  // namespace cpu

namespace cuda {
void glu_forward(float* out, const float* gu, int64_t N, int64_t F, GluAct act);
void glu_backward(float* dgu, const float* gu, const float* dout, int64_t N, int64_t F, GluAct act);
}  // namespace cuda

}  // namespace ftune
