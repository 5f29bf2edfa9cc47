// Mean squared error: argument checks and dispatch (see mse_loss.h).
#include "ops/mse_loss.h"

#include "ops/dispatch.h"

namespace ftune {
namespace {

void check_mse(const char* op, const TensorView& scores, const TensorView& labels) {
  if (scores.rank() != 2)
    throw ShapeError(fmt::format("{}: expected (B, K) scores, got {}", op, scores.shape.str()));
  check_f32(op, "scores", scores, scores.shape);
  if (labels.defined()) {
    check_shape(op, "labels", labels, Shape{scores.dim(0)});
    check_dtype(op, "labels", labels, DType::I32);
  }
}

const int32_t* mask_of(const TensorView& labels) {
  return labels.defined() ? labels.data_as<int32_t>() : nullptr;
}

}  // namespace

void mse_loss_forward(TensorView loss, TensorView residual, TensorView logits, TensorView targets,
                      TensorView labels) {
  const char* op = "mse_loss_forward";
  check_mse(op, logits, labels);
  check_f32(op, "targets", targets, logits.shape);
  check_f32(op, "residual", residual, logits.shape);
  check_f32(op, "loss", loss, Shape{1});
  const Device dev = common_device(op, {loss, residual, logits, targets, labels});
  FTUNE_DISPATCH(op, dev,
                 cpu::mse_loss_forward(loss.data_as<float>(), residual.data_as<float>(),
                                       logits.data_as<float>(), targets.data_as<float>(),
                                       mask_of(labels), logits.dim(0), logits.dim(1)),
                 cuda::mse_loss_forward(loss.data_as<float>(), residual.data_as<float>(),
                                        logits.data_as<float>(), targets.data_as<float>(),
                                        mask_of(labels), logits.dim(0), logits.dim(1)));
}

void mse_loss_backward(TensorView dlogits, TensorView residual, TensorView labels, float dloss,
                       const float* dloss_at) {
  const char* op = "mse_loss_backward";
  check_mse(op, residual, labels);
  check_f32(op, "dlogits", dlogits, residual.shape);
  const Device dev = common_device(op, {dlogits, residual, labels});
  FTUNE_DISPATCH(
      op, dev,
      cpu::mse_loss_backward(dlogits.data_as<float>(), residual.data_as<float>(), mask_of(labels),
                             dloss_at ? dloss * *dloss_at : dloss, residual.dim(0),
                             residual.dim(1)),
      cuda::mse_loss_backward(dlogits.data_as<float>(), residual.data_as<float>(), mask_of(labels),
                              dloss, dloss_at, residual.dim(0), residual.dim(1)));
}

}  // namespace ftune
