// Mean pooling: argument checks and dispatch.
#include "ops/mean_pool.h"

#include "ops/dispatch.h"

namespace ftune {
namespace {

// The tokens of the rows (B T padded, N packed: hidden's leading extent), checked with the rows.
int64_t pooled_tokens(const char* op, const TensorView& hidden, const MeanPoolRows& r, int64_t C) {
  const int64_t N = hidden.numel() / std::max<int64_t>(C, 1);
  if (r.cu_seqlens.defined()) {
    if (r.mask.defined()) throw ShapeError(fmt::format("{}: packed rows take no mask", op));
    check_shape(op, "cu_seqlens", r.cu_seqlens, Shape{r.B + 1});
    check_dtype(op, "cu_seqlens", r.cu_seqlens, DType::I32);
  } else {
    if (N != r.B * r.T)
      throw ShapeError(fmt::format("{}: hidden has {} tokens, rows {} x {}", op, N, r.B, r.T));
    check_shape(op, "mask", r.mask, Shape{N});
    check_dtype(op, "mask", r.mask, DType::I32);
  }
  return N;
}

const int32_t* ptr_or_null(const TensorView& v) {
  return v.defined() ? v.data_as<int32_t>() : nullptr;
}

}  // namespace

void mean_pool_forward(TensorView out, TensorView hidden, const MeanPoolRows& r) {
  const char* op = "mean_pool_forward";
  const int64_t C = hidden.dim(-1);
  pooled_tokens(op, hidden, r, C);
  check_f32(op, "hidden", hidden, hidden.shape);
  check_f32(op, "out", out, Shape{r.B, C});
  const Device dev = common_device(op, {out, hidden, r.mask, r.cu_seqlens});
  const int32_t *mask = ptr_or_null(r.mask), *cu = ptr_or_null(r.cu_seqlens);
  FTUNE_DISPATCH(op, dev,
                 cpu::mean_pool_forward(out.data_as<float>(), hidden.data_as<float>(), mask, cu,
                                        r.B, r.T, C),
                 cuda::mean_pool_forward(out.data_as<float>(), hidden.data_as<float>(), mask, cu,
                                         r.B, r.T, C));
}

void mean_pool_backward(TensorView dhidden, TensorView dout, const MeanPoolRows& r) {
  const char* op = "mean_pool_backward";
  const int64_t C = dhidden.dim(-1);
  pooled_tokens(op, dhidden, r, C);
  check_f32(op, "dhidden", dhidden, dhidden.shape);
  check_f32(op, "dout", dout, Shape{r.B, C});
  const Device dev = common_device(op, {dhidden, dout, r.mask, r.cu_seqlens});
  const int32_t *mask = ptr_or_null(r.mask), *cu = ptr_or_null(r.cu_seqlens);
  FTUNE_DISPATCH(op, dev,
                 cpu::mean_pool_backward(dhidden.data_as<float>(), dout.data_as<float>(), mask, cu,
                                         r.B, r.T, C),
                 cuda::mean_pool_backward(dhidden.data_as<float>(), dout.data_as<float>(), mask,
                                          cu, r.B, r.T, C));
}

}  // namespace ftune
