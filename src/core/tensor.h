// TensorView: a non-owning view of planned memory — data pointer, dtype, device, shape and strides
// (in elements). Views never allocate; memory comes from an Arena (or, for tests and I/O staging,
// from a HostTensor). Ops take views and check shape, dtype and device before dispatching.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace ftune {

constexpr int kMaxRank = 6;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  template <typename It>
  Shape(It begin, It end) {
    for (It it = begin; it != end; ++it) push_back(static_cast<int64_t>(*it));
  }

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  int64_t numel() const;
  void push_back(int64_t d);
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + rank_; }
  bool operator==(const Shape& o) const;
  std::string str() const;  // "(2, 3, 4)"

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  Device device;
  Shape shape;
  std::array<int64_t, kMaxRank> strides{};  // in elements

  TensorView() = default;
  TensorView(void* data, DType dtype, Device device, Shape shape);  // contiguous strides

  bool defined() const { return data != nullptr; }
  int rank() const { return shape.rank(); }
  int64_t dim(int i) const { return shape[i < 0 ? i + shape.rank() : i]; }
  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool is_contiguous() const;

  // Typed access; throws ShapeError if T does not match the view's dtype.
  template <typename T>
  T* data_as() const {
    if (dtype_of<T>::value != dtype)
      throw ShapeError("tensor holds " + std::string(dtype_name(dtype)) + ", accessed as " +
                       std::string(dtype_name(dtype_of<T>::value)));
    return static_cast<T*>(data);
  }

  // Same memory, new contiguous shape with the same element count (view must be contiguous).
  TensorView reshape(Shape new_shape) const;
  // Rows [begin, end) along dimension 0 (a contiguous sub-block for contiguous views).
  TensorView slice0(int64_t begin, int64_t end) const;
  // The sub-tensor at index i of dimension 0 (drops that dimension).
  TensorView select0(int64_t i) const;
  // The first shape.numel() elements of a contiguous view, viewed as `shape` (a buffer planned
  // for the largest batch holds every smaller one).
  TensorView prefix(Shape shape) const;
  // Contiguous 1-D view of [offset, offset + count) elements of a contiguous view.
  TensorView flat_range(int64_t offset, int64_t count) const;

  std::string describe() const;  // "f32 cpu (2, 3)"
};

}  // namespace ftune
