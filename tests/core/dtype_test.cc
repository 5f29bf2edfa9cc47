// bf16/f16 conversions: exact round trips, round-to-nearest-even, specials.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/dtype.h"

namespace ftune {
namespace {

TEST(DType, Bf16RoundTripsEveryPattern) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const bf16_t h{static_cast<uint16_t>(b)};
    const float f = bf16_to_float(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_bf16(f).bits, h.bits) << b;
  }
}

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies exactly between bf16 1.0 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);
  // Slightly above the midpoint rounds up.
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)).bits, 0x3f81);
  // 1 + 3*2^-8 is a tie between 0x3f81 and 0x3f82: even wins.
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_float(float_to_bf16(INFINITY)), INFINITY);
}

TEST(DType, F16RoundTripsEveryPattern) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const f16_t h{static_cast<uint16_t>(b)};
    const float f = f16_to_float(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_f16(f).bits, h.bits) << b;
  }
}

TEST(DType, F16KnownValuesAndRounding) {
  EXPECT_EQ(f16_to_float(f16_t{0x3c00}), 1.0f);
  EXPECT_EQ(f16_to_float(f16_t{0x7bff}), 65504.0f);
  EXPECT_EQ(f16_to_float(f16_t{0x0001}), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(float_to_f16(65520.0f).bits, 0x7c00);                 // rounds to infinity
  EXPECT_EQ(float_to_f16(65519.0f).bits, 0x7bff);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)).bits, 0x0000);  // tie to even (zero)
  EXPECT_EQ(float_to_f16(std::ldexp(1.5f, -25)).bits, 0x0001);
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);  // tie to even
  EXPECT_EQ(float_to_f16(-2.0f).bits, 0xc000);
  // Midpoints between consecutive f16 values round to the even one, for every normal pattern.
  for (uint16_t b = 0x0400; b < 0x7bff; ++b) {
    const float lo = f16_to_float(f16_t{b}), hi = f16_to_float(f16_t{static_cast<uint16_t>(b + 1)});
    const float mid = 0.5f * (lo + hi);
    EXPECT_EQ(float_to_f16(mid).bits, (b & 1) ? b + 1 : b) << b;
  }
}

}  // namespace
}  // namespace ftune
