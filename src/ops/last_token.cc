// Last-token pooling: argument checks and dispatch (ops/last_token.h).
#include "ops/last_token.h"

#include "ops/dispatch.h"

namespace ftune {
namespace {

// hidden as (N, C).
TensorView tokens_2d(const char* op, const char* arg, TensorView v) {
  if (v.rank() == 3) return v.reshape(Shape{v.dim(0) * v.dim(1), v.dim(2)});
  if (v.rank() != 2)
    throw ShapeError(fmt::format("{}: {} must be (N, C) or (B, T, C), got {}", op, arg,
                                 v.describe()));
  return v;
}

}  // namespace

void last_token_forward(TensorView out, TensorView index, TensorView hidden, TensorView ids,
                        const LastTokenRows& rows, int64_t pad_id) {
  const char* op = "last_token_forward";
  check_contiguous(op, "hidden", hidden);
  const TensorView h = tokens_2d(op, "hidden", hidden);
  const int64_t N = h.dim(0), C = h.dim(1), B = rows.B;
  check_f32(op, "hidden", h, h.shape);
  check_f32(op, "out", out, Shape{B, C});
  check_shape(op, "index", index, Shape{B});
  check_dtype(op, "index", index, DType::I32);
  check_shape(op, "ids", ids, Shape{N});
  check_dtype(op, "ids", ids, DType::I32);
  const int32_t* cu = nullptr;
  if (rows.cu_seqlens.defined()) {
    check_shape(op, "cu_seqlens", rows.cu_seqlens, Shape{B + 1});
    check_dtype(op, "cu_seqlens", rows.cu_seqlens, DType::I32);
    cu = rows.cu_seqlens.data_as<int32_t>();
  } else if (B * rows.T != N) {
    throw ShapeError(
        fmt::format("{}: {} rows of {} tokens, but hidden has {} tokens", op, B, rows.T, N));
  }
  const Device dev = common_device(op, {out, index, h, ids, rows.cu_seqlens});
  int32_t* idx = index.data_as<int32_t>();
  FTUNE_DISPATCH(op, dev,
                 {
                   cpu::last_token_index(idx, ids.data_as<int32_t>(), cu, B, rows.T, pad_id);
                   cpu::gather_rows(out.data_as<float>(), h.data_as<float>(), idx, B, C);
                 },
                 {
                   cuda::last_token_index(idx, ids.data_as<int32_t>(), cu, B, rows.T, pad_id);
                   cuda::gather_rows(out.data_as<float>(), h.data_as<float>(), idx, B, C);
                 });
}

void last_token_backward(TensorView dhidden, TensorView dout, TensorView index) {
  const char* op = "last_token_backward";
  check_contiguous(op, "dhidden", dhidden);
  const TensorView dh = tokens_2d(op, "dhidden", dhidden);
  const int64_t N = dh.dim(0), C = dh.dim(1);
  if (index.rank() != 1) throw ShapeError(fmt::format("{}: index must be (B)", op));
  const int64_t B = index.dim(0);
  check_f32(op, "dhidden", dh, dh.shape);
  check_f32(op, "dout", dout, Shape{B, C});
  check_dtype(op, "index", index, DType::I32);
  const Device dev = common_device(op, {dh, dout, index});
  FTUNE_DISPATCH(op, dev,
                 cpu::scatter_rows(dh.data_as<float>(), dout.data_as<float>(),
                                   index.data_as<int32_t>(), N, B, C),
                 cuda::scatter_rows(dh.data_as<float>(), dout.data_as<float>(),
                                    index.data_as<int32_t>(), N, B, C));
}

}  // namespace ftune
