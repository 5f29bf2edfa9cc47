// Arena layout: buffers are laid out in the order they were planned, each aligned to
// kBufferAlignment, so the plan's total is exactly what one allocation takes.
#include "core/arena.h"

#include <fmt/format.h>

#include <cstring>
#include <map>

#include "core/memory.h"

namespace ftune {

size_t ArenaPlan::add(std::string name, DType dtype, Shape shape) {
  if (index_.count(name))
    throw InternalError(fmt::format("arena plan: duplicate buffer '{}'", name));
  PlannedBuffer b;
  b.name = std::move(name);
  b.dtype = dtype;
  b.shape = shape;
  b.bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  b.offset = total_;
  total_ = align_up(total_ + b.bytes);
  index_.emplace(b.name, buffers_.size());
  buffers_.push_back(std::move(b));
  return buffers_.size() - 1;
}

bool ArenaPlan::contains(std::string_view name) const {
  return index_.count(std::string(name)) > 0;
}

const PlannedBuffer& ArenaPlan::buffer(std::string_view name) const {
  auto it = index_.find(std::string(name));
  if (it == index_.end()) throw InternalError(fmt::format("arena plan: no buffer '{}'", name));
  return buffers_[it->second];
}

std::vector<std::pair<std::string, size_t>> ArenaPlan::bytes_by_group() const {
  std::map<std::string, size_t> groups;
  for (const PlannedBuffer& b : buffers_) {
    const size_t slash = b.name.find('/');
    groups[slash == std::string::npos ? b.name : b.name.substr(0, slash)] += align_up(b.bytes);
  }
  return {groups.begin(), groups.end()};
}

Arena::Arena(Device device, ArenaPlan plan) : device_(device), plan_(std::move(plan)) {
  base_ = static_cast<char*>(device_malloc(device_, std::max<size_t>(plan_.total_bytes(), 1)));
}

Arena::~Arena() {
  release();
}

void Arena::release() {
  if (base_) device_free(device_, base_, std::max<size_t>(plan_.total_bytes(), 1));
  base_ = nullptr;
}

Arena::Arena(Arena&& other) noexcept
    : device_(other.device_), plan_(std::move(other.plan_)), base_(other.base_) {
  other.base_ = nullptr;
}

Arena& Arena::operator=(Arena&& other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    plan_ = std::move(other.plan_);
    base_ = other.base_;
    other.base_ = nullptr;
  }
  return *this;
}

TensorView Arena::view(size_t index) const {
  FTUNE_ASSERT(index < plan_.buffers().size(), "arena buffer index {} out of range", index);
  const PlannedBuffer& b = plan_.buffers()[index];
  return TensorView(base_ + b.offset, b.dtype, device_, b.shape);
}

TensorView Arena::view(std::string_view name) const {
  const PlannedBuffer& b = plan_.buffer(name);
  return TensorView(base_ + b.offset, b.dtype, device_, b.shape);
}

TensorView Arena::view(std::string_view name, Shape shape) const {
  const PlannedBuffer& b = plan_.buffer(name);
  FTUNE_ASSERT(static_cast<size_t>(shape.numel()) * dtype_size(b.dtype) <= b.bytes,
               "buffer '{}' planned as {} cannot hold {}", name, b.shape.str(), shape.str());
  return TensorView(base_ + b.offset, b.dtype, device_, shape);
}

void Arena::fill_with_sentinel() {
  if (!device_.is_cpu())
    throw NotBuiltError("arena sentinel: measuring touched bytes is implemented for CPU arenas");
  std::memset(base_, kSentinelByte, plan_.total_bytes());
}

size_t Arena::touched_bytes(size_t index) const {
  FTUNE_ASSERT(device_.is_cpu(), "touched_bytes on a {} arena", device_name(device_));
  const PlannedBuffer& b = plan_.buffers().at(index);
  uint32_t sentinel;
  std::memset(&sentinel, kSentinelByte, sizeof sentinel);
  const char* p = base_ + b.offset;
  size_t end = b.bytes;
  // Trailing bytes beyond a whole word, then whole words from the end.
  while (end % 4 != 0 && static_cast<unsigned char>(p[end - 1]) == kSentinelByte) --end;
  if (end % 4 != 0) return end;
  while (end >= 4) {
    uint32_t w;
    std::memcpy(&w, p + end - 4, 4);
    if (w != sentinel) break;
    end -= 4;
  }
  return end;
}

}  // namespace ftune
