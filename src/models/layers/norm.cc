// The norm layer block's passes (see norm.h).
#include "models/layers/norm.h"

#include "ops/cast.h"
#include "ops/layer_norm.h"
#include "ops/rms_norm.h"

namespace ftune {

Norm Norm::layer(TensorView weight, TensorView bias, TensorView weight_grad, TensorView bias_grad,
                 float eps) {
  Norm n;
  n.kind_ = NormKind::Layer;
  n.weight_ = weight, n.bias_ = bias, n.weight_grad_ = weight_grad, n.bias_grad_ = bias_grad;
  n.eps_ = eps;
  return n;
}

Norm Norm::rms(TensorView weight, TensorView weight_grad, float eps, float offset,
               TensorView workspace) {
  Norm n;
  n.kind_ = NormKind::Rms;
  n.weight_ = weight, n.weight_grad_ = weight_grad, n.workspace_ = workspace;
  n.eps_ = eps, n.offset_ = offset;
  return n;
}

void Norm::forward(TensorView out, TensorView mean, TensorView rstd, TensorView x,
                   TensorView stage) const {
  const TensorView y = stage.defined() ? stage.flat_range(0, out.numel()).reshape(out.shape) : out;
  if (kind_ == NormKind::Layer) {
    // The 16-bit copy in the same pass.
    layer_norm_forward(y, mean, rstd, x, weight_, bias_, eps_,
                       stage.defined() ? out : TensorView());
    return;
  }
  rms_norm_forward(y, rstd, x, weight_, eps_, offset_);
  if (y.data != out.data) cast(out, y);
}

void Norm::backward(TensorView dx, TensorView dy, TensorView x, TensorView mean,
                    TensorView rstd) const {
  if (kind_ == NormKind::Layer)
    layer_norm_backward(dx, weight_grad_, bias_grad_, dy, x, weight_, mean, rstd);
  else
    rms_norm_backward(dx, weight_grad_, dy, x, weight_, rstd, offset_, workspace_);
}

}  // namespace ftune
