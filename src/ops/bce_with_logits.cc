// Binary cross-entropy with logits: argument checks and dispatch (see bce_with_logits.h).
#include "ops/bce_with_logits.h"

#include "ops/dispatch.h"

namespace ftune {
namespace {

void check_bce(const char* op, const TensorView& scores, const TensorView& targets,
               const TensorView& labels) {
  if (scores.rank() != 2)
    throw ShapeError(fmt::format("{}: expected (B, K) logits, got {}", op, scores.shape.str()));
  check_f32(op, "targets", targets, scores.shape);
  if (labels.defined()) {
    check_shape(op, "labels", labels, Shape{scores.dim(0)});
    check_dtype(op, "labels", labels, DType::I32);
  }
}

const int32_t* labels_or_null(const TensorView& labels) {
  return labels.defined() ? labels.data_as<int32_t>() : nullptr;
}

}  // namespace

void bce_with_logits_forward(TensorView loss, TensorView probs, TensorView logits,
                             TensorView targets, TensorView labels) {
  const char* op = "bce_with_logits_forward";
  check_bce(op, logits, targets, labels);
  check_f32(op, "logits", logits, logits.shape);
  check_f32(op, "probs", probs, logits.shape);
  check_f32(op, "loss", loss, Shape{1});
  const Device dev = common_device(op, {loss, probs, logits, targets, labels});
  FTUNE_DISPATCH(
      op, dev,
      cpu::bce_with_logits_forward(loss.data_as<float>(), probs.data_as<float>(),
                                   logits.data_as<float>(), targets.data_as<float>(),
                                   labels_or_null(labels), logits.dim(0), logits.dim(1)),
      cuda::bce_with_logits_forward(loss.data_as<float>(), probs.data_as<float>(),
                                    logits.data_as<float>(), targets.data_as<float>(),
                                    labels_or_null(labels), logits.dim(0), logits.dim(1)));
}

void bce_with_logits_backward(TensorView dlogits, TensorView probs, TensorView targets,
                              TensorView labels, float dloss, const float* dloss_at) {
  const char* op = "bce_with_logits_backward";
  check_bce(op, probs, targets, labels);
  check_f32(op, "probs", probs, probs.shape);
  check_f32(op, "dlogits", dlogits, probs.shape);
  const Device dev = common_device(op, {dlogits, probs, targets, labels});
  FTUNE_DISPATCH(op, dev,
                 cpu::bce_with_logits_backward(dlogits.data_as<float>(), probs.data_as<float>(),
                                               targets.data_as<float>(), labels_or_null(labels),
                                               dloss_at ? dloss * *dloss_at : dloss, probs.dim(0),
                                               probs.dim(1)),
                 cuda::bce_with_logits_backward(dlogits.data_as<float>(), probs.data_as<float>(),
                                                targets.data_as<float>(), labels_or_null(labels),
                                                dloss, dloss_at, probs.dim(0), probs.dim(1)));
}

}  // namespace ftune
