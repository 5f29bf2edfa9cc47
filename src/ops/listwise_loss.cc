// Listwise loss: argument checks (offsets and relevance on the host when they are there) and
// dispatch.
#include "ops/listwise_loss.h"

#include <cmath>

#include "ops/dispatch.h"

namespace ftune {
namespace {

void check_listwise(const char* op, const TensorView& probs, const TensorView& relevance,
                    const TensorView& offsets) {
  if (probs.rank() != 1)
    throw ShapeError(fmt::format("{}: expected (N) probs, got {}", op, probs.shape.str()));
  const int64_t N = probs.dim(0);
  check_f32(op, "relevance", relevance, Shape{N});
  check_dtype(op, "offsets", offsets, DType::I32);
  if (offsets.rank() != 1 || offsets.dim(0) < 1)
    throw ShapeError(fmt::format("{}: expected (G + 1) offsets, got {}", op, offsets.shape.str()));
  if (offsets.device.is_cpu()) {
    const int32_t* o = offsets.data_as<int32_t>();
    const int64_t G = offsets.dim(0) - 1;
    if (o[0] != 0 || o[G] != N)
      throw ShapeError(
          fmt::format("{}: offsets run from {} to {}, expected 0 to {}", op, o[0], o[G], N));
    for (int64_t g = 0; g < G; ++g)
      if (o[g + 1] < o[g]) throw ShapeError(fmt::format("{}: offsets decrease at group {}", op, g));
  }
  if (relevance.device.is_cpu()) {
    const float* r = relevance.data_as<float>();
    for (int64_t i = 0; i < N; ++i)
      if (!(r[i] >= 0.0f) || !std::isfinite(r[i]))
        throw InputError(
            fmt::format("relevance {} of row {} is not a finite number >= 0", r[i], i));
  }
}

// Fixed groups: N rows in groups of group_size; returns G. `labels` are i32 label ids (their
// relevance max(id, 0)) or f32 relevance (a one-score head's targets).
int64_t check_fixed(const char* op, int64_t N, const TensorView& labels, int64_t group_size) {
  check_shape(op, "labels", labels, Shape{N});
  if (labels.dtype != DType::F32) check_dtype(op, "labels", labels, DType::I32);
  if (group_size < 1 || N % group_size != 0)
    throw ShapeError(fmt::format("{}: {} rows are not whole groups of {}", op, N, group_size));
  return N / group_size;
}

ListwiseGroups fixed_groups(const TensorView& labels, int64_t group_size) {
  if (labels.dtype == DType::F32) return {nullptr, group_size, labels.data_as<float>(), nullptr};
  return {nullptr, group_size, nullptr, labels.data_as<int32_t>()};
}

int64_t head_width(const char* op, const TensorView& logits) {
  if (logits.rank() != 2 || (logits.dim(1) != 1 && logits.dim(1) != 2))
    throw ShapeError(
        fmt::format("{}: expected (N, 1) or (N, 2) logits, got {}", op, logits.shape.str()));
  return logits.dim(1);
}

}  // namespace

void listwise_loss_forward(TensorView loss, TensorView probs, TensorView logits,
                           TensorView relevance, TensorView offsets) {
  const char* op = "listwise_loss_forward";
  const int64_t K = head_width(op, logits);
  check_f32(op, "logits", logits, Shape{logits.dim(0), K});
  check_f32(op, "probs", probs, Shape{logits.dim(0)});
  check_listwise(op, probs, relevance, offsets);
  check_f32(op, "loss", loss, Shape{1});
  const Device dev = common_device(op, {loss, probs, logits, relevance, offsets});
  const int64_t G = offsets.dim(0) - 1;
  const ListwiseGroups q{offsets.data_as<int32_t>(), 0, relevance.data_as<float>(), nullptr};
  FTUNE_DISPATCH(op, dev,
                 cpu::listwise_loss_forward(loss.data_as<float>(), probs.data_as<float>(),
                                            logits.data_as<float>(), q, G, K),
                 cuda::listwise_loss_forward(loss.data_as<float>(), probs.data_as<float>(),
                                             logits.data_as<float>(), q, G, K));
}

void listwise_loss_backward(TensorView dlogits, TensorView probs, TensorView relevance,
                            TensorView offsets, float dloss, const float* dloss_at) {
  const char* op = "listwise_loss_backward";
  const int64_t K = head_width(op, dlogits);
  check_f32(op, "dlogits", dlogits, Shape{dlogits.dim(0), K});
  check_f32(op, "probs", probs, Shape{dlogits.dim(0)});
  check_listwise(op, probs, relevance, offsets);
  const Device dev = common_device(op, {dlogits, probs, relevance, offsets});
  const int64_t G = offsets.dim(0) - 1;
  const ListwiseGroups q{offsets.data_as<int32_t>(), 0, relevance.data_as<float>(), nullptr};
  FTUNE_DISPATCH(op, dev,
                 cpu::listwise_loss_backward(dlogits.data_as<float>(), probs.data_as<float>(), q,
                                             dloss_at ? dloss * *dloss_at : dloss, G, K),
                 cuda::listwise_loss_backward(dlogits.data_as<float>(), probs.data_as<float>(), q,
                                              dloss, dloss_at, G, K));
}

void listwise_loss_forward(TensorView loss, TensorView probs, TensorView logits, TensorView labels,
                           int64_t group_size) {
  const char* op = "listwise_loss_forward";
  const int64_t K = head_width(op, logits), N = logits.dim(0);
  const int64_t G = check_fixed(op, N, labels, group_size);
  check_f32(op, "logits", logits, Shape{N, K});
  check_f32(op, "probs", probs, Shape{N});
  check_f32(op, "loss", loss, Shape{1});
  const Device dev = common_device(op, {loss, probs, logits, labels});
  const ListwiseGroups q = fixed_groups(labels, group_size);
  FTUNE_DISPATCH(op, dev,
                 cpu::listwise_loss_forward(loss.data_as<float>(), probs.data_as<float>(),
                                            logits.data_as<float>(), q, G, K),
                 cuda::listwise_loss_forward(loss.data_as<float>(), probs.data_as<float>(),
                                             logits.data_as<float>(), q, G, K));
}

void listwise_loss_backward(TensorView dlogits, TensorView probs, TensorView labels,
                            int64_t group_size, float dloss, const float* dloss_at) {
  const char* op = "listwise_loss_backward";
  const int64_t K = head_width(op, dlogits), N = dlogits.dim(0);
  const int64_t G = check_fixed(op, N, labels, group_size);
  check_f32(op, "dlogits", dlogits, Shape{N, K});
  check_f32(op, "probs", probs, Shape{N});
  const Device dev = common_device(op, {dlogits, probs, labels});
  const ListwiseGroups q = fixed_groups(labels, group_size);
  FTUNE_DISPATCH(op, dev,
                 cpu::listwise_loss_backward(dlogits.data_as<float>(), probs.data_as<float>(), q,
                                             dloss_at ? dloss * *dloss_at : dloss, G, K),
                 cuda::listwise_loss_backward(dlogits.data_as<float>(), probs.data_as<float>(), q,
                                              dloss, dloss_at, G, K));
}

}  // namespace ftune
