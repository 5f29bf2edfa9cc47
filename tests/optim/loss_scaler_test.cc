// Dynamic loss scaling (fp16): a non-finite gradient norm skips the step and halves the scale, a
// growth interval of finite steps doubles it, the state round-trips for resume, and a disabled
// scaler is the identity (scale 1, skips only what fp32 would).
#include "optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace ftune {
namespace {

TEST(LossScaler, HalvesOnOverflowAndDoublesAfterTheGrowthInterval) {
  LossScaler s({.enabled = true, .init_scale = 1024.0f, .growth_interval = 3});
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_FALSE(s.update(std::numeric_limits<double>::infinity()));
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_FALSE(s.update(std::nan("")));
  EXPECT_EQ(s.scale(), 256.0f);
  EXPECT_TRUE(s.update(3.0));
  EXPECT_TRUE(s.update(3.0));
  EXPECT_EQ(s.scale(), 256.0f);
  EXPECT_EQ(s.good_steps(), 2);
  EXPECT_TRUE(s.update(3.0));  // the third finite step in a row
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_TRUE(s.update(1.0));
  EXPECT_FALSE(s.update(INFINITY));  // an overflow also restarts the count
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_EQ(s.scale(), 256.0f);

  LossScaler r({.enabled = true});
  r.restore(128.0f, 7);
  EXPECT_EQ(r.scale(), 128.0f);
  EXPECT_EQ(r.good_steps(), 7);
}

TEST(LossScaler, ExhaustedBelowTheMinimumScale) {
  LossScaler s({.enabled = true, .init_scale = 2.0f, .growth_interval = 2000, .min_scale = 1.0f});
  EXPECT_FALSE(s.exhausted());
  s.update(INFINITY);
  EXPECT_FALSE(s.exhausted());  // 1
  s.update(INFINITY);
  EXPECT_TRUE(s.exhausted());  // 0.5
}

TEST(LossScaler, DisabledIsTheIdentity) {
  LossScaler s;
  EXPECT_FALSE(s.enabled());
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_TRUE(s.update(5.0));
  EXPECT_FALSE(s.update(INFINITY));
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_FALSE(s.exhausted());
  s.restore(64.0f, 3);
  EXPECT_EQ(s.scale(), 1.0f);
}

}  // namespace
}  // namespace ftune
