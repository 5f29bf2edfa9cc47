// The feed-forward layer block's passes (see feed_forward.h).
#include "models/layers/feed_forward.h"

#include "ops/dropout.h"

namespace ftune {

void FeedForward::forward(TensorView y, TensorView h, TensorView pre, TensorView x, TensorView xg,
                          bool recompute) const {
  in_.forward(pre, x, xg, recompute);
  if (act_.gated)
    glu_forward(h, pre, act_.glu);
  else
    gelu_forward(h, pre, act_.gelu);
  if (dropout_.p > 0) dropout_forward(h, h, dropout_.p, dropout_.rng, dropout_.rows);
  out_.forward(y, h, h, /*y_has_base=*/false, recompute);
}

void FeedForward::backward(TensorView dy, TensorView h, TensorView dh, TensorView pre,
                           TensorView dpre, TensorView x, TensorView xg, TensorView dx,
                           bool accumulate) const {
  out_.backward(dy, h, h, dh);
  if (dropout_.p > 0) dropout_backward(dh, dh, dropout_.p, dropout_.rng, dropout_.rows);
  if (act_.gated)
    glu_backward(dpre, pre, dh, act_.glu);
  else
    gelu_backward(dpre, pre, dh, act_.gelu);
  in_.backward(dpre, x, xg, dx, accumulate);
}

}  // namespace ftune
