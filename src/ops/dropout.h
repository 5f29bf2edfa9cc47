// Inverted dropout with masks from Philox: element e of a tensor is kept when
// philox_uniform_at(rng, stream index of e) >= p, and kept values are scaled by 1 / (1 - p). The
// mask is never stored — backward regenerates it from the same key — and it is identical on every
// backend and for every thread count.
//   forward:  out = inp * keep / (1 - p)     (out may alias inp)
//   backward: dinp = dout * keep / (1 - p)   (overwritten; may alias dout)
//
// Stream index (DESIGN principle 6: masks independent of the batch layout). The tensor is read as
// tokens of `inner` values (inner = its last dimension); token n is position t = n % T of sequence
// b = n / T, and element (b, t, c) draws stream element
//   ((row0 + b) * Tv + t) * inner + c
// The trainer sets row0 to the sequence's row in the optimizer step's batch and Tv (>= T) to a run
// constant, so a row's mask is the same whichever micro-batch carries it and however far that
// micro-batch is padded. With row0 = 0 and Tv = T it is the flat index (the default). When the key
// carries MicroParams (core/philox.h), row0 and the key's offset are read from them instead.
// Packed tensors (rows of different lengths back to back, no padding; data/token_batch.h): with
// `cu_seqlens` set, sequence b is tokens [cu[b], cu[b + 1]) and its element (t, c) draws the same
// stream element ((row0 + b) * Tv + t) * inner + c as in a padded tensor: packed and padded
// layouts of one batch get the same masks on every real token.
//
// Mixed precision: out and inp may each be f32, bf16 or f16 (e.g. backward from an fp32 LayerNorm
// gradient into the bf16 gradient a GEMM reads); the multiplier is applied in fp32 and the result
// rounded once. The mask does not depend on the dtype.
#pragma once

#include "core/philox.h"
#include "core/tensor.h"

namespace ftune {

// A micro-batch's place in the dropout streams of its optimizer step (see above).
struct DropoutRows {
  uint64_t row0 = 0;       // the tensor's first sequence: its row in the step batch
  int64_t seq = 1;         // T: positions per sequence in this tensor (padded layout)
  int64_t stream_seq = 0;  // Tv >= T: positions per sequence in the stream; 0 means T
  // Packed layout: `rows` sequences, row starts (rows + 1) readable by the op's device, and the
  // same on the host (the op's checks read it); seq is then not read.
  const int32_t* cu_seqlens = nullptr;
  const int32_t* host_cu_seqlens = nullptr;
  int64_t rows = 0;
};

// The same map as runs: sequence b's T * inner elements are one run of consecutive stream
// elements starting at first + b * stride (first = row0 * stride, stride = Tv * inner). Packed
// (cu set): sequence b's run is tensor elements [cu[b] * inner, cu[b + 1] * inner).
struct DropoutRuns {
  uint64_t first = 0;
  int64_t run = 1;     // T * inner: tensor elements per sequence
  int64_t stride = 1;  // Tv * inner: stream elements per sequence
  const int32_t* cu = nullptr;
  int64_t inner = 1;
  int64_t rows = 0;
};

// The packed sequence holding token n: the last b with cu[b] <= n.
FTUNE_HD int64_t dropout_packed_row(const DropoutRuns& r, int64_t n) {
  int64_t lo = 0, hi = r.rows;  // cu[lo] <= n < cu[hi]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (r.cu[mid] <= n) lo = mid; else hi = mid;
  }
  return lo;
}

FTUNE_HD uint64_t dropout_stream_index(const DropoutRuns& r, int64_t e) {
  if (r.cu != nullptr) {
    const int64_t b = dropout_packed_row(r, e / r.inner);
    return r.first + static_cast<uint64_t>(b) * static_cast<uint64_t>(r.stride) +
           static_cast<uint64_t>(e - static_cast<int64_t>(r.cu[b]) * r.inner);
  }
  const int64_t b = e / r.run;
  return r.first + static_cast<uint64_t>(b) * static_cast<uint64_t>(r.stride) +
         static_cast<uint64_t>(e - b * r.run);
}

// Elements from e to the end of its sequence's run (e's stream indices are consecutive there).
FTUNE_HD int64_t dropout_run_left(const DropoutRuns& r, int64_t e) {
  if (r.cu != nullptr)
    return static_cast<int64_t>(r.cu[dropout_packed_row(r, e / r.inner) + 1]) * r.inner - e;
  return r.run - e % r.run;
}

// resolve_micro (core/philox.h) for the runs of a DropoutRows map: first = row0 * stride.
FTUNE_HD void resolve_micro(RngKey& key, DropoutRuns& runs) {
  if (key.micro == nullptr) return;
  uint64_t row0 = 0;
  resolve_micro(key, row0);
  runs.first = row0 * static_cast<uint64_t>(runs.stride);
}

// Checks `rows` against a tensor of `numel` elements with `inner` values per token (a whole number
// of sequences, Tv >= T) and returns its runs; throws ShapeError naming `op`.
DropoutRuns dropout_runs(const char* op, const DropoutRows& rows, int64_t numel, int64_t inner);

void dropout_forward(TensorView out, TensorView inp, float p, RngKey rng,
                     const DropoutRows& rows = {});
void dropout_backward(TensorView dinp, TensorView dout, float p, RngKey rng,
                      const DropoutRows& rows = {});

namespace cpu {
void dropout_apply(float* out, const float* inp, int64_t n, float p, RngKey rng, DropoutRuns runs);
// m[i] = keep(first + i) ? 1 / (1 - p) : 0 for i in [0, n): the multipliers of stream elements
// [first, first + n) (attention's probabilities use it row by row).
void dropout_multipliers(float* m, RngKey rng, uint64_t first, int64_t n, float p);
// m[i] = the multiplier of tensor element e + i under `runs`, for i in [0, n) (rng and runs
// resolved: resolve_micro); what dropout_apply multiplies those elements by.
void dropout_element_multipliers(float* m, RngKey rng, const DropoutRuns& runs, int64_t e,
                                 int64_t n, float p);
}  // namespace cpu

namespace cuda {
void dropout_apply(float* out, const float* inp, int64_t n, float p, RngKey rng, DropoutRuns runs);
// Any pair of float storage types (out may alias inp only when the types are equal).
void dropout_apply_mixed(void* out, DType out_type, const void* inp, DType inp_type, int64_t n,
                         float p, RngKey rng, DropoutRuns runs);
}  // namespace cuda

}  // namespace ftune
