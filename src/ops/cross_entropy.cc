// Cross-entropy: argument checks (label range on the host) and dispatch.
#include "ops/cross_entropy.h"

#include "ops/dispatch.h"

namespace ftune {
namespace {

void check_ce(const char* op, const TensorView& probs, const TensorView& labels,
              const CrossEntropyOptions& o) {
  if (probs.rank() != 2)
    throw ShapeError(fmt::format("{}: expected (B, K) logits, got {}", op, probs.shape.str()));
  const int64_t B = probs.dim(0), K = probs.dim(1);
  check_f32(op, "probs", probs, Shape{B, K});
  check_shape(op, "labels", labels, Shape{B});
  check_dtype(op, "labels", labels, DType::I32);
  if (o.class_weights.defined()) check_f32(op, "class_weights", o.class_weights, Shape{K});
  if (!(o.label_smoothing >= 0.0f && o.label_smoothing <= 1.0f))
    throw ShapeError(fmt::format("{}: label_smoothing {} outside [0, 1]", op, o.label_smoothing));
  if (labels.device.is_cpu()) {
    const int32_t* y = labels.data_as<int32_t>();
    for (int64_t i = 0; i < B; ++i)
      if (y[i] >= K || (y[i] < 0 && y[i] != -100))
        throw InputError(
            fmt::format("label {} of row {} is outside [0, {}) (or -100 to ignore)", y[i], i, K));
  }
}

}  // namespace

void cross_entropy_forward(TensorView loss, TensorView probs, TensorView logits, TensorView labels,
                           const CrossEntropyOptions& o) {
  const char* op = "cross_entropy_forward";
  check_ce(op, logits, labels, o);
  check_f32(op, "probs", probs, logits.shape);
  check_f32(op, "loss", loss, Shape{1});
  const Device dev = common_device(op, {loss, probs, logits, labels, o.class_weights});
  FTUNE_DISPATCH(op, dev,
                 cpu::cross_entropy_forward(
                     loss.data_as<float>(), probs.data_as<float>(), logits.data_as<float>(),
                     labels.data_as<int32_t>(),
                     o.class_weights.defined() ? o.class_weights.data_as<float>() : nullptr,
                     o.label_smoothing, logits.dim(0), logits.dim(1)),
                 cuda::cross_entropy_forward(
                     loss.data_as<float>(), probs.data_as<float>(), logits.data_as<float>(),
                     labels.data_as<int32_t>(),
                     o.class_weights.defined() ? o.class_weights.data_as<float>() : nullptr,
                     o.label_smoothing, logits.dim(0), logits.dim(1)));
}

void cross_entropy_backward(TensorView dlogits, TensorView probs, TensorView labels,
                            const CrossEntropyOptions& o, float dloss, const float* dloss_at) {
  const char* op = "cross_entropy_backward";
  check_ce(op, probs, labels, o);
  check_f32(op, "dlogits", dlogits, probs.shape);
  const Device dev = common_device(op, {dlogits, probs, labels, o.class_weights});
  FTUNE_DISPATCH(op, dev,
                 cpu::cross_entropy_backward(
                     dlogits.data_as<float>(), probs.data_as<float>(), labels.data_as<int32_t>(),
                     o.class_weights.defined() ? o.class_weights.data_as<float>() : nullptr,
                     o.label_smoothing, dloss_at ? dloss * *dloss_at : dloss, probs.dim(0),
                     probs.dim(1)),
                 cuda::cross_entropy_backward(
                     dlogits.data_as<float>(), probs.data_as<float>(), labels.data_as<int32_t>(),
                     o.class_weights.defined() ? o.class_weights.data_as<float>() : nullptr,
                     o.label_smoothing, dloss, dloss_at, probs.dim(0), probs.dim(1)));
}

}  // namespace ftune
