// MarginMSE over query groups: argument checks and dispatch (see margin_mse_loss.h).
#include "ops/margin_mse_loss.h"

#include "ops/dispatch.h"

namespace ftune {
namespace {

void check_groups(const char* op, const TensorView& scores, const TensorView& labels,
                  int64_t group_size) {
  if (scores.rank() != 2 || scores.dim(1) != 1)
    throw ShapeError(fmt::format("{}: expected (N, 1) scores (one score per row), got {}", op,
                                 scores.shape.str()));
  const int64_t N = scores.dim(0);
  check_f32(op, "scores", scores, Shape{N, 1});
  check_shape(op, "labels", labels, Shape{N});
  check_dtype(op, "labels", labels, DType::I32);
  if (group_size < 2 || N % group_size != 0)
    throw ShapeError(
        fmt::format("{}: {} rows are not whole groups of {} (a positive and at least "
                    "one negative each)",
                    op, N, group_size));
}

}  // namespace

void margin_mse_loss_forward(TensorView loss, TensorView residual, TensorView logits,
                             TensorView teacher, TensorView labels, int64_t group_size) {
  const char* op = "margin_mse_loss_forward";
  check_groups(op, logits, labels, group_size);
  const int64_t N = logits.dim(0);
  check_f32(op, "teacher", teacher, Shape{N});
  check_f32(op, "residual", residual, Shape{N});
  check_f32(op, "loss", loss, Shape{1});
  const Device dev = common_device(op, {loss, residual, logits, teacher, labels});
  FTUNE_DISPATCH(op, dev,
                 cpu::margin_mse_loss_forward(loss.data_as<float>(), residual.data_as<float>(),
                                              logits.data_as<float>(), teacher.data_as<float>(),
                                              labels.data_as<int32_t>(), N, group_size),
                 cuda::margin_mse_loss_forward(loss.data_as<float>(), residual.data_as<float>(),
                                               logits.data_as<float>(), teacher.data_as<float>(),
                                               labels.data_as<int32_t>(), N, group_size));
}

void margin_mse_loss_backward(TensorView dlogits, TensorView residual, TensorView labels,
                              int64_t group_size, float dloss, const float* dloss_at) {
  const char* op = "margin_mse_loss_backward";
  check_groups(op, dlogits, labels, group_size);
  const int64_t N = dlogits.dim(0);
  check_f32(op, "residual", residual, Shape{N});
  const Device dev = common_device(op, {dlogits, residual, labels});
  FTUNE_DISPATCH(
      op, dev,
      cpu::margin_mse_loss_backward(dlogits.data_as<float>(), residual.data_as<float>(),
                                    labels.data_as<int32_t>(), dloss_at ? dloss * *dloss_at : dloss,
                                    N, group_size),
      cuda::margin_mse_loss_backward(dlogits.data_as<float>(), residual.data_as<float>(),
                                     labels.data_as<int32_t>(), dloss, dloss_at, N, group_size));
}

}  // namespace ftune
