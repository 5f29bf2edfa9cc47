// Dropout: argument checks and dispatch. Forward and backward apply the same scaled mask.
#include "ops/dropout.h"

#include <algorithm>

#include "ops/cast.h"
#include "ops/dispatch.h"

namespace ftune {

DropoutRuns dropout_runs(const char* op, const DropoutRows& rows, int64_t numel, int64_t inner) {
  if (rows.cu_seqlens) {
    const int32_t* cu = rows.host_cu_seqlens;
    if (!cu || rows.rows < 1 || inner < 1 || cu[0] != 0 ||
        static_cast<int64_t>(cu[rows.rows]) * inner != numel)
      throw ShapeError(fmt::format(
          "{}: {} elements are not the packed rows of their cu_seqlens ({} rows of {} values)", op,
          numel, rows.rows, inner));
    int64_t longest = 0;
    for (int64_t b = 0; b < rows.rows; ++b) {
      if (cu[b + 1] < cu[b])
        throw ShapeError(fmt::format("{}: cu_seqlens decreases at row {}", op, b));
      longest = std::max<int64_t>(longest, cu[b + 1] - cu[b]);
    }
    if (rows.stream_seq < longest)
      throw ShapeError(fmt::format("{}: packed row of {} positions exceeds the dropout stream's {}",
                                   op, longest, rows.stream_seq));
    const int64_t stride = rows.stream_seq * inner;
    return DropoutRuns{rows.row0 * static_cast<uint64_t>(stride), 1, stride, rows.cu_seqlens,
                       inner, rows.rows};
  }
  const int64_t Tv = rows.stream_seq > 0 ? rows.stream_seq : rows.seq;
  if (rows.seq < 1 || inner < 1 || numel % inner != 0 || (numel / inner) % rows.seq != 0)
    throw ShapeError(
        fmt::format("{}: {} elements are not whole sequences of {} positions of {} values", op,
                    numel, rows.seq, inner));
  if (Tv < rows.seq)
    throw ShapeError(
        fmt::format("{}: sequence length {} exceeds the dropout stream's {}", op, rows.seq, Tv));
  return DropoutRuns{rows.row0 * static_cast<uint64_t>(Tv * inner), rows.seq * inner, Tv * inner};
}

namespace {

void dropout_apply(const char* op, TensorView out, TensorView inp, float p, RngKey rng,
                   const DropoutRows& rows) {
  if (inp.dtype != DType::F32 || out.dtype != DType::F32) {
    check_float(op, "inp", inp, inp.shape);
    check_float(op, "out", out, inp.shape);
    if (out.dtype != inp.dtype && out.data == inp.data)
      throw ShapeError(fmt::format("{}: out ({}) aliases inp ({})", op, dtype_name(out.dtype),
                                   dtype_name(inp.dtype)));
    if (!(p >= 0.0f && p < 1.0f)) throw ShapeError(fmt::format("{}: p = {} outside [0, 1)", op, p));
    const int64_t n = inp.numel();
    if (n == 0) return;
    const DropoutRuns runs = dropout_runs(op, rows, n, inp.rank() > 0 ? inp.dim(-1) : 1);
    const Device dev = common_device(op, {out, inp});
    FTUNE_DISPATCH(
        op, dev,
        {
          int64_t ld;
          const float* x = cpu::stage_f32(inp.data, inp.dtype, 1, n, n, 0, &ld);
          float* y = out.dtype == DType::F32 ? out.data_as<float>() : cpu::staging(1, n);
          cpu::dropout_apply(y, x, n, p, rng, runs);
          if (out.dtype != DType::F32) cpu::store_f32(out.data, out.dtype, y, 1, n, n);
        },
        cuda::dropout_apply_mixed(out.data, out.dtype, inp.data, inp.dtype, n, p, rng, runs));
    return;
  }
  check_f32(op, "inp", inp, inp.shape);
  check_f32(op, "out", out, inp.shape);
  if (!(p >= 0.0f && p < 1.0f)) throw ShapeError(fmt::format("{}: p = {} outside [0, 1)", op, p));
  const int64_t n = inp.numel();
  if (n == 0) return;
  const DropoutRuns runs = dropout_runs(op, rows, n, inp.rank() > 0 ? inp.dim(-1) : 1);
  const Device dev = common_device(op, {out, inp});
  FTUNE_DISPATCH(op, dev,
                 cpu::dropout_apply(out.data_as<float>(), inp.data_as<float>(), n, p, rng, runs),
                 cuda::dropout_apply(out.data_as<float>(), inp.data_as<float>(), n, p, rng, runs));
}

}  // namespace

void dropout_forward(TensorView out, TensorView inp, float p, RngKey rng, const DropoutRows& rows) {
  dropout_apply("dropout_forward", out, inp, p, rng, rows);
}

void dropout_backward(TensorView dinp, TensorView dout, float p, RngKey rng,
                      const DropoutRows& rows) {
  dropout_apply("dropout_backward", dinp, dout, p, rng, rows);
}

}  // namespace ftune
