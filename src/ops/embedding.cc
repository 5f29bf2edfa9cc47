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
  check_f32(op, "table", table, Shape{V, C});
  check_f32(op, "out", out, Shape{N, C});
  check_ids(op, ids, V);
  const Device dev = common_device(op, {out, ids, table});
  FTUNE_DISPATCH(op, dev,
                 cpu::embedding_forward(out.data_as<float>(), ids.data_as<int32_t>(),
                                        table.data_as<float>(), N, C, accumulate),
                 cuda::embedding_forward(out.data_as<float>(), ids.data_as<int32_t>(),
                                         table.data_as<float>(), N, C, accumulate));
}

void embedding_backward(TensorView dtable, TensorView dout, TensorView ids, int64_t padding_idx) {
  const char* op = "embedding_backward";
  if (dtable.rank() != 2)
    throw ShapeError("embedding_backward: dtable must be 2-D, got " + dtable.describe());
  const int64_t V = dtable.dim(0), C = dtable.dim(1), N = ids.numel();
  check_f32(op, "dtable", dtable, Shape{V, C});
  check_f32(op, "dout", dout, Shape{N, C});
  check_ids(op, ids, V);
  const Device dev = common_device(op, {dtable, dout, ids});
  FTUNE_DISPATCH(op, dev,
                 cpu::embedding_backward(dtable.data_as<float>(), dout.data_as<float>(),
                                         ids.data_as<int32_t>(), N, C, padding_idx),
                 cuda::embedding_backward(dtable.data_as<float>(), dout.data_as<float>(),
                                          ids.data_as<int32_t>(), N, C, padding_idx));
}

}  // namespace ftune
