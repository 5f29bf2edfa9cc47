// Shape arithmetic and view slicing. Pure bookkeeping: nothing here touches tensor memory.
#include "core/tensor.h"

#include <fmt/format.h>

namespace ftune {

Shape::Shape(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) push_back(d);
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

void Shape::push_back(int64_t d) {
  if (rank_ == kMaxRank) throw ShapeError(fmt::format("shape rank exceeds {}", kMaxRank));
  if (d < 0) throw ShapeError(fmt::format("negative dimension {}", d));
  dims_[rank_++] = d;
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + (rank_ == 1 ? ",)" : ")");
}

TensorView::TensorView(void* data_, DType dtype_, Device device_, Shape shape_)
    : data(data_), dtype(dtype_), device(device_), shape(shape_) {
  int64_t stride = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= shape[i];
  }
}

bool TensorView::is_contiguous() const {
  int64_t stride = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != stride) return false;
    stride *= shape[i];
  }
  return true;
}

TensorView TensorView::reshape(Shape new_shape) const {
  if (!is_contiguous()) throw ShapeError("reshape of a non-contiguous view " + describe());
  if (new_shape.numel() != numel())
    throw ShapeError(fmt::format("cannot reshape {} to {}", shape.str(), new_shape.str()));
  return TensorView(data, dtype, device, new_shape);
}

TensorView TensorView::slice0(int64_t begin, int64_t end) const {
  if (rank() < 1 || begin < 0 || end < begin || end > shape[0])
    throw ShapeError(fmt::format("slice [{}, {}) out of range for {}", begin, end, shape.str()));
  TensorView v = *this;
  v.data = static_cast<char*>(data) + begin * strides[0] * static_cast<int64_t>(dtype_size(dtype));
  v.shape[0] = end - begin;
  return v;
}

TensorView TensorView::select0(int64_t i) const {
  if (rank() < 1 || i < 0 || i >= shape[0])
    throw ShapeError(fmt::format("index {} out of range for {}", i, shape.str()));
  TensorView v;
  v.data = static_cast<char*>(data) + i * strides[0] * static_cast<int64_t>(dtype_size(dtype));
  v.dtype = dtype;
  v.device = device;
  for (int d = 1; d < rank(); ++d) {
    v.shape.push_back(shape[d]);
    v.strides[d - 1] = strides[d];
  }
  return v;
}

TensorView TensorView::prefix(Shape new_shape) const {
  if (!is_contiguous()) throw ShapeError("prefix of a non-contiguous view " + describe());
  if (new_shape.numel() > numel())
    throw ShapeError(
        fmt::format("buffer planned as {} cannot hold {}", shape.str(), new_shape.str()));
  return TensorView(data, dtype, device, new_shape);
}

TensorView TensorView::flat_range(int64_t offset, int64_t count) const {
  if (!is_contiguous()) throw ShapeError("flat_range of a non-contiguous view " + describe());
  if (offset < 0 || count < 0 || offset + count > numel())
    throw ShapeError(
        fmt::format("flat range [{}, {}) out of {} elements", offset, offset + count, numel()));
  return TensorView(static_cast<char*>(data) + offset * static_cast<int64_t>(dtype_size(dtype)),
                    dtype, device, Shape{count});
}

std::string TensorView::describe() const {
  return fmt::format("{} {} {}", dtype_name(dtype), device_name(device), shape.str());
}

}  // namespace ftune
