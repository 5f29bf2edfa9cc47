// TensorView shape bookkeeping and host transfers.
#include <gtest/gtest.h>

#include "core/memory.h"
#include "core/tensor.h"

namespace ftune {
namespace {

TEST(Tensor, ContiguousStridesSliceSelectReshape) {
  HostTensor t(DType::F32, Shape{2, 3, 4});
  TensorView v = t.view();
  EXPECT_EQ(v.strides[0], 12);
  EXPECT_EQ(v.strides[2], 1);
  EXPECT_TRUE(v.is_contiguous());
  TensorView row = v.select0(1);
  EXPECT_EQ(row.shape, (Shape{3, 4}));
  EXPECT_EQ(static_cast<float*>(row.data) - static_cast<float*>(v.data), 12);
  TensorView s = v.slice0(1, 2);
  EXPECT_EQ(s.shape, (Shape{1, 3, 4}));
  EXPECT_EQ(v.reshape(Shape{6, 4}).shape, (Shape{6, 4}));
  EXPECT_THROW(v.reshape(Shape{5, 4}), ShapeError);
  EXPECT_THROW(v.slice0(1, 3), ShapeError);
  EXPECT_THROW(v.data_as<int32_t>(), ShapeError);
  EXPECT_EQ(v.flat_range(4, 8).shape, (Shape{8}));
  EXPECT_EQ(Shape({2, 3}).str(), "(2, 3)");
}

TEST(Tensor, ConvertRoundsThroughBf16AndF16) {
  HostTensor f(DType::F32, Shape{3});
  f.data<float>()[0] = 1.0f;
  f.data<float>()[1] = -2.5f;
  f.data<float>()[2] = 3.14159f;
  HostTensor b(DType::BF16, Shape{3}), back(DType::F32, Shape{3});
  convert(b.view(), f.view());
  convert(back.view(), b.view());
  EXPECT_EQ(back.data<float>()[0], 1.0f);
  EXPECT_EQ(back.data<float>()[1], -2.5f);
  EXPECT_NEAR(back.data<float>()[2], 3.14159f, 0.01f);
  HostTensor h(DType::F16, Shape{3});
  convert(h.view(), f.view());
  convert(back.view(), h.view());
  EXPECT_NEAR(back.data<float>()[2], 3.14159f, 0.002f);
  HostTensor wrong(DType::F32, Shape{4});
  EXPECT_THROW(copy(wrong.view(), f.view()), ShapeError);
}

}  // namespace
}  // namespace ftune
