// The vectorisable exp and erf of ops/fast_math.h against libm (double) on dense grids.
#include "ops/fast_math.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ftune {
namespace {

TEST(FastMath, ExpRelativeErrorBelow4e7) {
  double worst = 0;
  for (double x = -87.0; x <= 88.0; x += 1e-3) {
    const double want = std::exp(double(float(x)));
    worst = std::max(worst, std::fabs(fast_exp(float(x)) - want) / want);
  }
  EXPECT_LT(worst, 4e-7);
  EXPECT_EQ(fast_exp(-88.0f), 0.0f);
  EXPECT_EQ(fast_exp(-INFINITY), 0.0f);
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
}

TEST(FastMath, ErfAbsoluteErrorBelow4e7) {
  double worst = 0;
  for (double x = -6.0; x <= 6.0; x += 1e-4)
    worst = std::max(worst, std::fabs(fast_erf(float(x)) - std::erf(double(float(x)))));
  EXPECT_LT(worst, 4e-7);
  EXPECT_EQ(fast_erf(0.0f), 0.0f);
  EXPECT_EQ(fast_erf(10.0f), 1.0f);
  EXPECT_EQ(fast_erf(-10.0f), -1.0f);
}

}  // namespace
}  // namespace ftune
