// First-token selection: argument checks and dispatch.
#include "ops/first_token.h"

#include "ops/dispatch.h"
#include "ops/last_token.h"

namespace ftune {

void first_token_forward(TensorView out, TensorView hidden) {
  const char* op = "first_token_forward";
  if (hidden.rank() != 3)
    throw ShapeError("first_token_forward: hidden must be (B, T, C), got " + hidden.describe());
  const int64_t B = hidden.dim(0), T = hidden.dim(1), C = hidden.dim(2);
  check_f32(op, "hidden", hidden, hidden.shape);
  check_f32(op, "out", out, Shape{B, C});
  const Device dev = common_device(op, {out, hidden});
  FTUNE_DISPATCH(op, dev,
                 cpu::first_token_forward(out.data_as<float>(), hidden.data_as<float>(), B, T, C),
                 cuda::first_token_forward(out.data_as<float>(), hidden.data_as<float>(), B, T, C));
}

void first_token_backward(TensorView dhidden, TensorView dout) {
  const char* op = "first_token_backward";
  if (dhidden.rank() != 3)
    throw ShapeError("first_token_backward: dhidden must be (B, T, C), got " + dhidden.describe());
  const int64_t B = dhidden.dim(0), T = dhidden.dim(1), C = dhidden.dim(2);
  check_f32(op, "dhidden", dhidden, dhidden.shape);
  check_f32(op, "dout", dout, Shape{B, C});
  const Device dev = common_device(op, {dhidden, dout});
  FTUNE_DISPATCH(
      op, dev, cpu::first_token_backward(dhidden.data_as<float>(), dout.data_as<float>(), B, T, C),
      cuda::first_token_backward(dhidden.data_as<float>(), dout.data_as<float>(), B, T, C));
}

namespace {

// The packed form's (N, C) view and its row starts (B + 1) i32: the first B are the gather index.
void check_packed(const char* op, const char* arg, const TensorView& tokens,
                  const TensorView& rows, const TensorView& cu_seqlens) {
  if (tokens.rank() != 2)
    throw ShapeError(fmt::format("{}: {} must be (N, C) for packed rows, got {}", op, arg,
                                 tokens.describe()));
  check_f32(op, arg, tokens, tokens.shape);
  const int64_t B = rows.rank() == 2 ? rows.dim(0) : -1;
  check_f32(op, arg[0] == 'd' ? "dout" : "out", rows, Shape{B, tokens.dim(1)});
  check_shape(op, "cu_seqlens", cu_seqlens, Shape{B + 1});
  check_dtype(op, "cu_seqlens", cu_seqlens, DType::I32);
  check_contiguous(op, "cu_seqlens", cu_seqlens);
}

}  // namespace

void first_token_forward(TensorView out, TensorView hidden, TensorView cu_seqlens) {
  const char* op = "first_token_forward";
  check_packed(op, "hidden", hidden, out, cu_seqlens);
  const int64_t B = out.dim(0), C = out.dim(1);
  const Device dev = common_device(op, {out, hidden, cu_seqlens});
  const int32_t* index = cu_seqlens.data_as<int32_t>();
  FTUNE_DISPATCH(op, dev,
                 cpu::gather_rows(out.data_as<float>(), hidden.data_as<float>(), index, B, C),
                 cuda::gather_rows(out.data_as<float>(), hidden.data_as<float>(), index, B, C));
}

void first_token_backward(TensorView dhidden, TensorView dout, TensorView cu_seqlens) {
  const char* op = "first_token_backward";
  check_packed(op, "dhidden", dhidden, dout, cu_seqlens);
  const int64_t N = dhidden.dim(0), B = dout.dim(0), C = dout.dim(1);
  const Device dev = common_device(op, {dhidden, dout, cu_seqlens});
  const int32_t* index = cu_seqlens.data_as<int32_t>();
  FTUNE_DISPATCH(
      op, dev,
      cpu::scatter_rows(dhidden.data_as<float>(), dout.data_as<float>(), index, N, B, C),
      cuda::scatter_rows(dhidden.data_as<float>(), dout.data_as<float>(), index, N, B, C));
}

}  // namespace ftune
