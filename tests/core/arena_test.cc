// Arena planning: alignment, one allocation, views, accounting and the memory budget.
#include <gtest/gtest.h>

#include "core/arena.h"
#include "core/memory.h"

namespace ftune {
namespace {

TEST(Arena, PlansAlignedBuffersAndAllocatesOnce) {
  ArenaPlan plan;
  plan.add("param/a", DType::F32, Shape{3, 5});
  plan.add("grad/a", DType::F32, Shape{3, 5});
  plan.add("act/ids", DType::I32, Shape{7});
  EXPECT_EQ(plan.buffer("grad/a").offset % kBufferAlignment, 0u);
  EXPECT_EQ(plan.buffer("act/ids").offset, 2 * kBufferAlignment);
  EXPECT_EQ(plan.total_bytes(), 3 * kBufferAlignment);
  const auto groups = plan.bytes_by_group();
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].first, "act");

  const size_t before = device_bytes_in_use(DeviceKind::CPU);
  {
    Arena arena(Device::cpu(), plan);
    EXPECT_EQ(device_bytes_in_use(DeviceKind::CPU) - before, plan.total_bytes());
    TensorView a = arena.view("param/a");
    TensorView g = arena.view("grad/a");
    EXPECT_EQ(static_cast<char*>(g.data) - static_cast<char*>(a.data), 256);
    EXPECT_EQ(a.shape, (Shape{3, 5}));
    TensorView smaller = arena.view("param/a", Shape{2, 5});
    EXPECT_EQ(smaller.data, a.data);
    EXPECT_THROW(arena.view("param/a", Shape{4, 5}), InternalError);
    EXPECT_THROW(arena.view("missing"), InternalError);
  }
  EXPECT_EQ(device_bytes_in_use(DeviceKind::CPU), before);
}

TEST(Arena, DuplicateNamesAreRejected) {
  ArenaPlan plan;
  plan.add("x", DType::F32, Shape{1});
  EXPECT_THROW(plan.add("x", DType::F32, Shape{1}), InternalError);
}

TEST(Arena, BudgetTurnsIntoOutOfMemory) {
  ArenaPlan plan;
  plan.add("big", DType::F32, Shape{1 << 20});
  set_device_memory_limit(DeviceKind::CPU, device_bytes_in_use(DeviceKind::CPU) + 1024);
  EXPECT_THROW(Arena(Device::cpu(), plan), OutOfMemoryError);
  set_device_memory_limit(DeviceKind::CPU, std::nullopt);
  EXPECT_NO_THROW(Arena(Device::cpu(), plan));
}

}  // namespace
}  // namespace ftune
