// Columns [begin, begin + count) of a 2-D view with its rows as they are (the row stride stays):
// a block of a fused projection's output, such as q, k and v of a fused QKV GEMM.
#pragma once

#include <fmt/format.h>

#include "core/error.h"
#include "core/tensor.h"

namespace ftune {

inline TensorView columns(const TensorView& v, int64_t begin, int64_t count) {
  if (v.rank() != 2 || begin < 0 || count < 0 || begin + count > v.dim(1))
    throw ShapeError(
        fmt::format("columns [{}, {}) out of range for {}", begin, begin + count, v.shape.str()));
  TensorView out = v;
  out.data = static_cast<char*>(v.data) + begin * v.strides[1] * static_cast<int64_t>(dtype_size(v.dtype));
  out.shape = Shape{v.dim(0), count};
  return out;
}

}  // namespace ftune
