// First-token selection: argument checks and dispatch.
#include "ops/first_token.h"

#include "ops/dispatch.h"
#include "ops/last_token.h"

namespace ftune {
namespace {

// The kernels copy rows and write zeros, nothing else, so they run on any storage type as 4-byte
// words: a row of C 16-bit values (C even) is C / 2 words. `a` and `b` must share one float type
// (ops/dispatch.h check_float); returns the row width in words.
int64_t row_words(const char* op, const TensorView& a, const TensorView& b, int64_t C) {
  if (a.dtype != b.dtype)
    throw ShapeError(fmt::format("{}: the two tensors must have one dtype, got {} and {}", op,
                                 dtype_name(a.dtype), dtype_name(b.dtype)));
  if (dtype_size(a.dtype) == 4) return C;
  if (C % 2 != 0)
    throw ShapeError(fmt::format("{}: 16-bit rows need an even width, got {}", op, C));
  return C / 2;
}

float* words(const TensorView& t) {
  return static_cast<float*>(t.data);
}

}  // namespace

void first_token_forward(TensorView out, TensorView hidden) {
  const char* op = "first_token_forward";
  if (hidden.rank() != 3)
    throw ShapeError("first_token_forward: hidden must be (B, T, C), got " + hidden.describe());
  const int64_t B = hidden.dim(0), T = hidden.dim(1);
  check_float(op, "hidden", hidden, hidden.shape);
  check_float(op, "out", out, Shape{B, hidden.dim(2)});
  const int64_t C = row_words(op, out, hidden, hidden.dim(2));
  const Device dev = common_device(op, {out, hidden});
  FTUNE_DISPATCH(op, dev, cpu::first_token_forward(words(out), words(hidden), B, T, C),
                 cuda::first_token_forward(words(out), words(hidden), B, T, C));
}

void first_token_backward(TensorView dhidden, TensorView dout) {
  const char* op = "first_token_backward";
  if (dhidden.rank() != 3)
    throw ShapeError("first_token_backward: dhidden must be (B, T, C), got " + dhidden.describe());
  const int64_t B = dhidden.dim(0), T = dhidden.dim(1);
  check_float(op, "dhidden", dhidden, dhidden.shape);
  check_float(op, "dout", dout, Shape{B, dhidden.dim(2)});
  const int64_t C = row_words(op, dhidden, dout, dhidden.dim(2));
  const Device dev = common_device(op, {dhidden, dout});
  FTUNE_DISPATCH(op, dev, cpu::first_token_backward(words(dhidden), words(dout), B, T, C),
                 cuda::first_token_backward(words(dhidden), words(dout), B, T, C));
}

namespace {

// The packed form's (N, C) view and its row starts (B + 1) i32: the first B are the gather index.
void check_packed(const char* op, const char* arg, const TensorView& tokens,
                  const TensorView& rows, const TensorView& cu_seqlens) {
  if (tokens.rank() != 2)
    throw ShapeError(fmt::format("{}: {} must be (N, C) for packed rows, got {}", op, arg,
                                 tokens.describe()));
  check_float(op, arg, tokens, tokens.shape);
  const int64_t B = rows.rank() == 2 ? rows.dim(0) : -1;
  check_float(op, arg[0] == 'd' ? "dout" : "out", rows, Shape{B, tokens.dim(1)});
  check_shape(op, "cu_seqlens", cu_seqlens, Shape{B + 1});
  check_dtype(op, "cu_seqlens", cu_seqlens, DType::I32);
  check_contiguous(op, "cu_seqlens", cu_seqlens);
}

}  // namespace

void first_token_forward(TensorView out, TensorView hidden, TensorView cu_seqlens) {
  const char* op = "first_token_forward";
  check_packed(op, "hidden", hidden, out, cu_seqlens);
  const int64_t B = out.dim(0), C = row_words(op, out, hidden, out.dim(1));
  const Device dev = common_device(op, {out, hidden, cu_seqlens});
  const int32_t* index = cu_seqlens.data_as<int32_t>();
  FTUNE_DISPATCH(op, dev, cpu::gather_rows(words(out), words(hidden), index, B, C),
                 cuda::gather_rows(words(out), words(hidden), index, B, C));
}

void first_token_backward(TensorView dhidden, TensorView dout, TensorView cu_seqlens) {
  const char* op = "first_token_backward";
  check_packed(op, "dhidden", dhidden, dout, cu_seqlens);
  const int64_t N = dhidden.dim(0), B = dout.dim(0), C = row_words(op, dhidden, dout, dout.dim(1));
  const Device dev = common_device(op, {dhidden, dout, cu_seqlens});
  const int32_t* index = cu_seqlens.data_as<int32_t>();
  FTUNE_DISPATCH(op, dev, cpu::scatter_rows(words(dhidden), words(dout), index, N, B, C),
                 cuda::scatter_rows(words(dhidden), words(dout), index, N, B, C));
}

}  // namespace ftune
