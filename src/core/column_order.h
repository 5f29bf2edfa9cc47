// The one order in which ftune sums a (rows, cols) matrix over its rows, column by column: bias
// gradients, LayerNorm weight and bias gradients, DoRA's magnitude gradient, the unfused bias
// gradient of a GEMM. The CPU (ops/primitives_cpu.h, cpu::column_reduce) and CUDA
// (cuda/column_reduce.cuh) both follow it, so they give the same bits for the same inputs, and
// neither depends on the thread count or the GPU:
//
//   the rows are cut into chunks of column_chunk_rows(rows, values) consecutive rows;
//   in a chunk starting at row s, lane l (0 <= l < kColumnLanes) adds rows s + l, s + l + 8, ...
//     in increasing order, from 0;
//   the chunk's partial is lane 0 + lane 1 + ... + lane 7, in lane order, from 0;
//   the column's total is chunk 0 + chunk 1 + ..., in chunk order, from 0;
//   then out = total, or out += total (gradients accumulate).
//
// On the GPU a block of 32 columns x 8 lanes sums one chunk (stage 1, thousands of blocks for
// model shapes: rows are split across blocks, not walked by one block per 32 columns), and one
// thread per column adds the chunks' partials (stage 2). The partials of all chunks must fit a
// fixed scratch of kColumnPartialFloats floats per device, so very wide matrices get longer chunks
// (a pure function of the shape: the same order every run, on every device).
// Plain sums (bias gradients) are therefore bit-identical on the CPU and the GPU. A reduction of
// products (LayerNorm's dout * xhat) follows the same order but may differ in the last bits where
// one compiler contracts a multiply and an add into one fused operation and the other does not.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace ftune {

constexpr int kColumnLanes = 8;
constexpr int64_t kColumnChunkRows = 256;            // rows per chunk, unless too many chunks
constexpr int64_t kColumnPartialFloats = int64_t{1} << 20;  // 4 MiB of partials per device
constexpr int64_t kColumnMaxChunks = 4096;  // (a grid dimension on the GPU)
// A reduction's result that is written (a GEMM's fused bias gradient) and then added where
// gradients accumulate: up to this many floats per device, next to the partials.
constexpr int64_t kColumnResultFloats = int64_t{1} << 16;

// Rows per chunk for `rows` rows of `values` reduced values per row (cols x values summed per
// element): kColumnChunkRows, or more when the partials of that many chunks would not fit
// kColumnPartialFloats; a multiple of kColumnLanes, at least one chunk.
FTUNE_HD int64_t column_chunk_rows(int64_t rows, int64_t values) {
  int64_t chunk = kColumnChunkRows;
  int64_t max_chunks = values > 0 ? kColumnPartialFloats / values : 1;
  if (max_chunks > kColumnMaxChunks) max_chunks = kColumnMaxChunks;
  if (max_chunks <= 1) return rows > chunk ? (rows + kColumnLanes - 1) / kColumnLanes * kColumnLanes
                                           : chunk;
  while ((rows + chunk - 1) / chunk > max_chunks) chunk *= 2;
  return chunk;
}

FTUNE_HD int64_t column_chunks(int64_t rows, int64_t values) {
  const int64_t chunk = column_chunk_rows(rows, values);
  const int64_t n = (rows + chunk - 1) / chunk;
  return n < 1 ? 1 : n;
}

}  // namespace ftune
