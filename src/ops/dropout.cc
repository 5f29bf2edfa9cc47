// Dropout: argument checks and dispatch. Forward and backward apply the same scaled mask.
#include "ops/dropout.h"

#include "ops/dispatch.h"

namespace ftune {

DropoutRuns dropout_runs(const char* op, const DropoutRows& rows, int64_t numel, int64_t inner) {
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
