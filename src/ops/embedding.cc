// Embedding: argument checks (including the id range, checked on the host) and dispatch.
#include "ops/embedding.h"

#include "ops/dispatch.h"

namespace ftune {
namespace {

void check_ids(const char* op, const TensorView& ids, int64_t vocab) {
  check_dtype(op, "ids", ids, DType::I32);
  check_contiguous(op, "ids", ids);
  if (!ids.device.is_cpu()) return;  // device ids are validated by the batch builder on the host
  const int32_t* p = ids.data_as<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    if (p[i] < 0 || p[i] >= vocab)
      throw InputError(fmt::format(
          "token id {} at position {} is outside the embedding table of {} rows", p[i], i, vocab));
}

}  // namespace

void embedding_forward(TensorView out, TensorView ids, TensorView table, bool accumulate) {
  const char* op = "embedding_forward";
  if (table.rank() != 2)
    throw ShapeError("embedding_forward: table must be 2-D, got " + table.describe());
  const int64_t V = table.dim(0), C = table.dim(1), N = ids.numel();
  check_float(op, "table", table, Shape{V, C});  // f32, bf16 or f16
  check_f32(op, "out", out, Shape{N, C});
  check_ids(op, ids, V);
  const Device dev = common_device(op, {out, ids, table});
  FTUNE_DISPATCH(op, dev,
                 cpu::embedding_forward(out.data_as<float>(), ids.data_as<int32_t>(), table.data,
                                        table.dtype, N, C, accumulate),
                 cuda::embedding_forward(out.data_as<float>(), ids.data_as<int32_t>(), table.data,
                                         table.dtype, N, C, accumulate));
}

int64_t embedding_sort_scratch_bytes(int64_t N) {
  // CUB's radix sort of N (key, value) pairs given both double buffers: its histograms (a few KiB
  // per pass) and decoupled look-back (~1 KiB per tile of a few thousand keys), or its classic
  // path's spine (grid size x 256 digits x 4 bytes, under 1 MiB on today's GPUs): 4 MiB + N bytes
  // holds every variant with a wide margin (checked on every call against CUB's own answer).
  return (int64_t{4} << 20) + N;
}

EmbeddingCudaLayout embedding_cuda_layout(int64_t N, int64_t C) {
  const auto align = [](int64_t n) { return (n + 255) / 256 * 256; };
  const int64_t windows = (N + kEmbeddingWindow - 1) / kEmbeddingWindow;
  EmbeddingCudaLayout l;
  l.keys0 = 0;
  l.keys1 = l.keys0 + align(4 * N);
  l.values0 = l.keys1 + align(4 * N);
  l.values1 = l.values0 + align(4 * N);
  l.head = l.values1 + align(4 * N);
  l.tail = l.head + align(4 * windows * C);
  l.sort = l.tail + align(4 * windows * C);
  l.sort_bytes = embedding_sort_scratch_bytes(N);
  l.total = l.sort + align(l.sort_bytes);
  return l;
}

int64_t embedding_backward_workspace(Device device, int64_t N, int64_t C) {
  if (device.is_cpu()) return 2 * N;  // N (id, token) pairs of 8 bytes
  return (embedding_cuda_layout(N, C).total + 3) / 4;
}

void embedding_backward(TensorView dtable, TensorView dout, TensorView ids, int64_t padding_idx,
                        TensorView workspace) {
  const char* op = "embedding_backward";
  if (dtable.rank() != 2)
    throw ShapeError("embedding_backward: dtable must be 2-D, got " + dtable.describe());
  const int64_t V = dtable.dim(0), C = dtable.dim(1), N = ids.numel();
  if (dtable.dtype != DType::F32)
    throw ShapeError(fmt::format("{}: dtable has dtype {}; a 16-bit table is frozen (no gradient), "
                                 "gradients are f32",
                                 op, dtype_name(dtable.dtype)));
  check_f32(op, "dtable", dtable, Shape{V, C});
  check_f32(op, "dout", dout, Shape{N, C});
  check_ids(op, ids, V);
  check_dtype(op, "workspace", workspace, DType::F32);
  check_contiguous(op, "workspace", workspace);
  const Device dev = common_device(op, {dtable, dout, ids, workspace});
  const int64_t need = embedding_backward_workspace(dev, N, C);
  if (workspace.numel() < need)
    throw ShapeError(fmt::format("{}: workspace of {} floats, needs {} for {} tokens of {} values",
                                 op, workspace.numel(), need, N, C));
  if (N * C == 0) return;
  FTUNE_DISPATCH(op, dev,
                 cpu::embedding_backward(dtable.data_as<float>(), dout.data_as<float>(),
                                         ids.data_as<int32_t>(), N, C, padding_idx,
                                         static_cast<int64_t*>(workspace.data)),
                 cuda::embedding_backward(dtable.data_as<float>(), dout.data_as<float>(),
                                          ids.data_as<int32_t>(), N, C, V, padding_idx,
                                          workspace.data));
}

}  // namespace ftune
