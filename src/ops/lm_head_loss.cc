// The fused LM-head loss (ops/lm_head_loss.h): its workspace layout, argument checks, dispatch to
// the CPU op or its CUDA twin, and the read-back of the tokens counted.
#include "ops/lm_head_loss.h"

#include <algorithm>

#include "core/memory.h"
#include "ops/dispatch.h"

namespace ftune {
namespace {

int64_t align4(int64_t floats) { return (floats + 3) / 4 * 4; }

bool is_16bit(DType t) { return t == DType::BF16 || t == DType::F16; }

void check_args(const char* op, const TensorView& h, const TensorView& W, const TensorView& labels,
                const TensorView& lse, const TensorView& workspace, const LmHeadLossShape& s) {
  if (s.head != DType::F32 && !is_16bit(s.head))
    throw ShapeError(fmt::format("{}: head type {}, expected f32, bf16 or f16", op,
                                 dtype_name(s.head)));
  if (s.compute != DType::F32 && !is_16bit(s.compute))
    throw ShapeError(fmt::format("{}: compute type {}, expected f32, bf16 or f16", op,
                                 dtype_name(s.compute)));
  if (is_16bit(s.head) && s.compute != DType::F32 && s.compute != s.head)
    throw ShapeError(fmt::format("{}: a {} head computes in its own type, not {}", op,
                                 dtype_name(s.head), dtype_name(s.compute)));
  check_f32(op, "h", h, Shape{s.tokens, s.hidden});
  check_float(op, "W", W, Shape{s.vocab, s.hidden});
  check_dtype(op, "W", W, s.head);
  check_shape(op, "labels", labels, Shape{s.tokens});
  check_dtype(op, "labels", labels, DType::I32);
  check_f32(op, "lse", lse, Shape{s.tokens});
  check_dtype(op, "workspace", workspace, DType::F32);
  check_contiguous(op, "workspace", workspace);
  if (workspace.numel() < lm_head_loss_workspace(s))
    throw ShapeError(fmt::format("{}: workspace of {} floats, {} needed", op, workspace.numel(),
                                 lm_head_loss_workspace(s)));
}

}  // namespace

DType lm_head_loss_operand(const LmHeadLossShape& s) {
  return is_16bit(s.head) ? s.head : s.compute;
}

LmHeadLossLayout lm_head_loss_layout(const LmHeadLossShape& s) {
  LmHeadLossLayout L;
  L.rows = std::min(s.token_chunk, std::max<int64_t>(s.tokens, 1));
  L.cols = std::min(s.vocab_chunk, std::max<int64_t>(s.vocab, 1));
  L.state = align4(L.rows * L.cols);
  L.count = L.state + 2 * L.rows + 2 + 2 * L.rows;  // after run_sum, total, run_max, target
  L.floats = align4(L.count + 2);
  if (is_16bit(lm_head_loss_operand(s))) {
    L.h16 = L.floats;
    L.g16 = L.h16 + align4((L.rows * s.hidden + 1) / 2);
    L.floats = L.g16 + align4((L.rows * L.cols + 1) / 2);
    if (s.head == DType::F32) {
      L.w16 = L.floats;
      L.floats = L.w16 + align4((L.cols * s.hidden + 1) / 2);
    }
  }
  return L;
}

int64_t lm_head_loss_workspace(const LmHeadLossShape& s) { return lm_head_loss_layout(s).floats; }

void lm_head_loss_forward(TensorView loss, TensorView lse, TensorView h, TensorView W,
                          TensorView labels, double normalizer, const LmHeadLossShape& s,
                          TensorView workspace) {
  const char* op = "lm_head_loss_forward";
  check_args(op, h, W, labels, lse, workspace, s);
  check_f32(op, "loss", loss, Shape{1});
  const Device dev = common_device(op, {loss, lse, h, W, labels, workspace});
  FTUNE_DISPATCH(op, dev,
                 cpu::lm_head_loss_forward(loss.data_as<float>(), lse.data_as<float>(),
                                           h.data_as<float>(), W.data, labels.data_as<int32_t>(),
                                           normalizer, s, workspace.data_as<float>()),
                 cuda::lm_head_loss_forward(loss.data_as<float>(), lse.data_as<float>(),
                                            h.data_as<float>(), W.data, labels.data_as<int32_t>(),
                                            normalizer, s, workspace.data_as<float>()));
}

void lm_head_loss_backward(TensorView dh, TensorView dW, TensorView lse, TensorView h,
                           TensorView W, TensorView labels, double normalizer, float dloss,
                           const float* dloss_at, const LmHeadLossShape& s, TensorView workspace) {
  const char* op = "lm_head_loss_backward";
  check_args(op, h, W, labels, lse, workspace, s);
  check_f32(op, "dh", dh, h.shape);
  if (dW.defined()) {
    if (s.head != DType::F32)
      throw ShapeError(fmt::format("{}: a {} head is a frozen one: it takes no gradient", op,
                                   dtype_name(s.head)));
    check_f32(op, "dW", dW, W.shape);
  }
  const Device dev = common_device(op, {dh, dW, lse, h, W, labels, workspace});
  float* dw = dW.defined() ? dW.data_as<float>() : nullptr;
  FTUNE_DISPATCH(op, dev,
                 cpu::lm_head_loss_backward(dh.data_as<float>(), dw, lse.data_as<float>(),
                                            h.data_as<float>(), W.data, labels.data_as<int32_t>(),
                                            normalizer, dloss_at ? dloss * *dloss_at : dloss, s,
                                            workspace.data_as<float>()),
                 cuda::lm_head_loss_backward(dh.data_as<float>(), dw, lse.data_as<float>(),
                                             h.data_as<float>(), W.data,
                                             labels.data_as<int32_t>(), normalizer, dloss,
                                             dloss_at, s, workspace.data_as<float>()));
}

int64_t lm_head_loss_counted(TensorView workspace, const LmHeadLossShape& s) {
  const LmHeadLossLayout L = lm_head_loss_layout(s);
  check_dtype("lm_head_loss_counted", "workspace", workspace, DType::F32);
  if (workspace.numel() < L.floats)
    throw ShapeError(fmt::format("lm_head_loss_counted: workspace of {} floats, {} needed",
                                 workspace.numel(), L.floats));
  int32_t n = 0;
  copy(TensorView(&n, DType::I32, Device::cpu(), Shape{1}),
       TensorView(workspace.data_as<float>() + L.count, DType::I32, workspace.device, Shape{1}));
  return n;
}

}  // namespace ftune
