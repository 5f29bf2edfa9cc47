// CausalLmLoss (see causal_lm_loss.h): planning and the two passes.
#include "models/causal_lm_loss.h"

#include "core/memory.h"

namespace ftune {

LmHeadLossShape CausalLmLoss::shape_at(int64_t tokens) const {
  LmHeadLossShape s = shape_;
  s.tokens = tokens;
  return s;
}

void CausalLmLoss::buffers(BufferTable& t, bool training) {
  t.add("act/lm_loss/lse", DType::F32, {shape_.tokens}, &lse_);
  t.add("work/lm_loss/block", DType::F32, {lm_head_loss_workspace(shape_)}, &workspace_);
  if (training) t.add("gradact/lm_loss/dhidden", DType::F32, {shape_.tokens, shape_.hidden}, &dhidden_);
}

void CausalLmLoss::forward(TensorView loss, TensorView hidden, TensorView W, TensorView labels,
                           double normalizer) {
  const int64_t N = hidden.numel() / shape_.hidden;
  const TensorView h = hidden.reshape({N, shape_.hidden});
  lm_head_loss_forward(loss, lse_.prefix({N}), h, W, labels.prefix({N}), normalizer, shape_at(N),
                       workspace_);
  last_tokens_ = N;
}

int64_t CausalLmLoss::counted() const {
  return last_tokens_ > 0 ? lm_head_loss_counted(workspace_, shape_at(last_tokens_)) : 0;
}

TensorView CausalLmLoss::backward(TensorView hidden, TensorView W, TensorView dW, TensorView labels,
                                  double normalizer, float dloss, const float* dloss_at) {
  const int64_t N = hidden.numel() / shape_.hidden;
  const TensorView h = hidden.reshape({N, shape_.hidden});
  const TensorView dh = dhidden_.prefix({N, shape_.hidden});
  fill_zero(dh);  // the op accumulates
  lm_head_loss_backward(dh, dW, lse_.prefix({N}), h, W, labels.prefix({N}), normalizer, dloss,
                        dloss_at, shape_at(N), workspace_);
  return dh;
}

}  // namespace ftune
