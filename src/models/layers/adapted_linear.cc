// The adapted linear layer block's binding and passes (see adapted_linear.h).
#include "models/layers/adapted_linear.h"

#include "ops/linear.h"

namespace ftune {

AdaptedLinear::AdaptedLinear(const LinearParams& p, const AdapterPass& pass,
                             const AdapterSlot& slot)
    : p_(p) {
  const AdapterSet* ad = pass.adapters;
  if (!ad || !ad->any() || static_cast<int64_t>(ad->layers.size()) <= slot.layer ||
      !ad->at(slot.layer, slot.kind).defined())
    return;
  adapted_ = true;
  run_ = adapter_run(*ad, pass.grads, slot.layer, slot.kind);
  run_.weight = p.weight;
  run_.bias = p.bias;
  run_.gemm_weight = p.gemm_weight;
  run_.u = slot.buffers.u;
  run_.z = slot.buffers.z;
  run_.h = pass.scratch.h;
  run_.stage_x = pass.scratch.stage_x;
  run_.stage_y = pass.scratch.stage_y;
  run_.stage_dx = pass.scratch.stage_dx;
  const DropoutPlan& d = pass.dropout;
  run_.dropout = LoraDropout{d.training ? ad->dropout : 0.0f,
                             RngKey{d.seed, slot.dropout_site, d.offset, d.micro},
                             pass.scratch.dropout, slot.dropout_rows};
}

void AdaptedLinear::forward(TensorView y, TensorView x, TensorView xg, bool y_has_base,
                            bool recompute) const {
  if (adapted_)
    adapter_site_forward(run_, y, x, xg, y_has_base, recompute);
  else if (!y_has_base)
    linear_forward(y, xg, p_.gemm_weight, p_.gemm_bias);
}

void AdaptedLinear::backward_scale(TensorView dy) const {
  if (dora()) adapter_site_backward_scale(run_, dy);
}

void AdaptedLinear::backward_adapter(TensorView dy, TensorView x, TensorView dx) const {
  if (adapted_) adapter_site_backward(run_, dy, x, dx);
}

void AdaptedLinear::base_backward(TensorView dy, TensorView xg, TensorView dx, bool accumulate,
                                  bool guard) const {
  if (guard && !dx.defined() && !p_.weight_grad.defined() && !p_.bias_grad.defined()) return;
  linear_backward(dx, p_.weight_grad, p_.bias_grad, dy, xg, p_.gemm_weight, accumulate);
}

void AdaptedLinear::backward(TensorView dy, TensorView x, TensorView xg, TensorView dx,
                             bool accumulate, bool guard) const {
  backward_scale(dy);
  base_backward(dy, xg, dx, accumulate, guard);
  backward_adapter(dy, x, dx);
}

}  // namespace ftune
