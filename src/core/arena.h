// Planned memory: an ArenaPlan lists every named buffer a run needs (parameters, gradients,
// optimizer state, activations, workspace) before anything is allocated; an Arena then allocates
// the plan as ONE block on one device and hands out views. Nothing is allocated afterwards: the
// step loop only ever sees views into this block (the llm.c / ggml-alloc approach).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace ftune {

struct PlannedBuffer {
  std::string name;  // "param/encoder.layer.0.attention.self.query.weight", "act/layer0/qkv", ...
  DType dtype;
  Shape shape;
  size_t offset = 0;  // bytes from the arena base, aligned to kBufferAlignment
  size_t bytes = 0;
};

class ArenaPlan {
 public:
  // Reserves a named buffer and returns its index. Names must be unique.
  size_t add(std::string name, DType dtype, Shape shape);
  // Reserves `count` contiguous elements as one buffer; views of parts can be cut with
  // TensorView::flat_range. Used so that all parameters (and their gradients, moments) are one
  // flat range the optimizer can sweep in a single pass.
  size_t add_flat(std::string name, DType dtype, int64_t count) {
    return add(std::move(name), dtype, Shape{count});
  }

  size_t total_bytes() const { return total_; }
  const std::vector<PlannedBuffer>& buffers() const { return buffers_; }
  bool contains(std::string_view name) const;
  const PlannedBuffer& buffer(std::string_view name) const;

  // Bytes per group, the group being the name up to the first '/': param, grad, adam, act, ...
  std::vector<std::pair<std::string, size_t>> bytes_by_group() const;

 private:
  std::vector<PlannedBuffer> buffers_;
  std::unordered_map<std::string, size_t> index_;
  size_t total_ = 0;
};

class Arena {
 public:
  Arena() = default;
  // Allocates plan.total_bytes() on `device` in one call; throws OutOfMemoryError if it does not
  // fit.
  Arena(Device device, ArenaPlan plan);
  ~Arena();
  Arena(Arena&& other) noexcept;
  Arena& operator=(Arena&& other) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  Device device() const { return device_; }
  size_t capacity() const { return plan_.total_bytes(); }
  const ArenaPlan& plan() const { return plan_; }

  TensorView view(size_t index) const;
  TensorView view(std::string_view name) const;
  // A view of the named buffer with a smaller leading dimension (dynamic batch shapes reuse the
  // buffer planned for the largest batch).
  TensorView view(std::string_view name, Shape shape) const;

  // Measuring what a run really uses (CPU arenas): fill_with_sentinel() writes a byte pattern over
  // the whole block (before binding); touched_bytes(i) is then the extent of buffer i up to its
  // last 4-byte word that no longer holds the pattern — its high-water mark. The memory planner's
  // tests compare these with the plan.
  void fill_with_sentinel();
  size_t touched_bytes(size_t index) const;
  static constexpr unsigned char kSentinelByte = 0xA5;

 private:
  void release();
  Device device_;
  ArenaPlan plan_;
  char* base_ = nullptr;
};

}  // namespace ftune
