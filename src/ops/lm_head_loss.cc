// The fused LM-head loss (ops/lm_head_loss.h): argument checks and dispatch. The CUDA twin is not
// written yet: on a GPU it stops with a clear error rather than a silent CPU fallback.
#include "ops/lm_head_loss.h"

#include "ops/dispatch.h"

namespace ftune {
namespace {

void check_args(const char* op, const TensorView& h, const TensorView& W, const TensorView& labels,
                const TensorView& lse, const TensorView& workspace, const LmHeadLossShape& s) {
  check_f32(op, "h", h, Shape{s.tokens, s.hidden});
  check_f32(op, "W", W, Shape{s.vocab, s.hidden});
  check_shape(op, "labels", labels, Shape{s.tokens});
  check_dtype(op, "labels", labels, DType::I32);
  check_f32(op, "lse", lse, Shape{s.tokens});
  check_dtype(op, "workspace", workspace, DType::F32);
  if (workspace.numel() < lm_head_loss_workspace(s))
    throw ShapeError(fmt::format("{}: workspace of {} floats, {} needed", op, workspace.numel(),
                                 lm_head_loss_workspace(s)));
}

}  // namespace

int64_t lm_head_loss_forward(TensorView loss, TensorView lse, TensorView h, TensorView W,
                             TensorView labels, double normalizer, const LmHeadLossShape& s,
                             TensorView workspace) {
  const char* op = "lm_head_loss_forward";
  check_args(op, h, W, labels, lse, workspace, s);
  check_f32(op, "loss", loss, Shape{1});
  const Device dev = common_device(op, {loss, lse, h, W, labels, workspace});
  int64_t counted = 0;
  FTUNE_DISPATCH(op, dev,
                 counted = cpu::lm_head_loss_forward(
                     loss.data_as<float>(), lse.data_as<float>(), h.data_as<float>(),
                     W.data_as<float>(), labels.data_as<int32_t>(), normalizer, s,
                     workspace.data_as<float>()),
                 cuda_kernel_missing(op));
  return counted;
}

void lm_head_loss_backward(TensorView dh, TensorView dW, TensorView lse, TensorView h,
                           TensorView W, TensorView labels, double normalizer, float dloss,
                           const float* dloss_at, const LmHeadLossShape& s, TensorView workspace) {
  const char* op = "lm_head_loss_backward";
  check_args(op, h, W, labels, lse, workspace, s);
  check_f32(op, "dh", dh, h.shape);
  if (dW.defined()) check_f32(op, "dW", dW, W.shape);
  const Device dev = common_device(op, {dh, dW, lse, h, W, labels, workspace});
  FTUNE_DISPATCH(op, dev,
                 cpu::lm_head_loss_backward(dh.data_as<float>(),
                                            dW.defined() ? dW.data_as<float>() : nullptr,
                                            lse.data_as<float>(), h.data_as<float>(),
                                            W.data_as<float>(), labels.data_as<int32_t>(),
                                            normalizer, dloss_at ? dloss * *dloss_at : dloss, s,
                                            workspace.data_as<float>()),
                 cuda_kernel_missing(op));
}

}  // namespace ftune
