// The norm layer block: LayerNorm (ModernBERT; weight and optional bias) or RMSNorm (the decoders;
// weight, with Gemma's offset) over the rows of an fp32 input, with its gradients (undefined:
// frozen). Under mixed precision a 16-bit output is formed in fp32 staging and rounded once (a
// LayerNorm writes its 16-bit copy in the same pass), as autocast's fp32 norms feeding a 16-bit
// GEMM do. BERT's and DeBERTa's norms, fused with the residual add and dropout
// (ops/dropout_add_norm.h), and the decoders' per-head q / k and sandwich norms stay ops calls.
//
// Gradient rule: the weight's and bias's gradients accumulate (+=); dx is written (=).
#pragma once

#include "core/tensor.h"

namespace ftune {

enum class NormKind { Layer, Rms };

class Norm {
 public:
  // LayerNorm y = (x - mean) * rstd * weight + bias.
  static Norm layer(TensorView weight, TensorView bias, TensorView weight_grad,
                    TensorView bias_grad, float eps);
  // RMSNorm y = x * rstd * (offset + weight); `workspace`: what its backward needs
  // (ops/rms_norm.h rms_norm_backward_workspace).
  static Norm rms(TensorView weight, TensorView weight_grad, float eps, float offset,
                  TensorView workspace);

  // out (N, C) = norm(x (N, C), fp32); mean and rstd (N) are saved (mean: LayerNorm only). With
  // `stage` (fp32, >= N * C: mixed precision) the norm is formed there and rounded once into the
  // 16-bit out.
  void forward(TensorView out, TensorView mean, TensorView rstd, TensorView x,
               TensorView stage = TensorView()) const;
  // dx (N, C) = the input gradient of dy; the weight's (and bias's) gradients += when trained.
  void backward(TensorView dx, TensorView dy, TensorView x, TensorView mean,
                TensorView rstd) const;

 private:
  NormKind kind_ = NormKind::Layer;
  TensorView weight_, bias_, weight_grad_, bias_grad_, workspace_;
  float eps_ = 0.0f, offset_ = 0.0f;
};

}  // namespace ftune
