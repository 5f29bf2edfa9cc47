// Philox4x32-10 against the Random123 known-answer vectors, and the stream helpers.
#include <gtest/gtest.h>

#include <set>

#include "core/philox.h"

namespace ftune {
namespace {

TEST(Philox, KnownAnswerVectors) {
  // Random123's kat_vectors for philox4x32_10.
  Philox4 zero = philox4x32_10(Philox4{{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(zero.v[0], 0x6627e8d5u);
  EXPECT_EQ(zero.v[1], 0xe169c58du);
  EXPECT_EQ(zero.v[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.v[3], 0x9b00dbd8u);
  Philox4 ones = philox4x32_10(Philox4{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
                               0xffffffffu, 0xffffffffu);
  EXPECT_EQ(ones.v[0], 0x408f276du);
  EXPECT_EQ(ones.v[1], 0x41c83b0eu);
  EXPECT_EQ(ones.v[2], 0xa20bc7c6u);
  EXPECT_EQ(ones.v[3], 0x6d5451fdu);
  Philox4 pi = philox4x32_10(Philox4{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
                             0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(pi.v[0], 0xd16cfe09u);
  EXPECT_EQ(pi.v[1], 0x94fdccebu);
  EXPECT_EQ(pi.v[2], 0x5001e420u);
  EXPECT_EQ(pi.v[3], 0x24126ea1u);
}

TEST(Philox, UniformsAreInRangeAndStreamsDiffer) {
  RngKey a{42, 1, 0}, b{42, 2, 0}, c{42, 1, 1};
  double sum = 0;
  const int n = 100000;
  std::set<float> distinct;
  for (int i = 0; i < n; ++i) {
    const float u = philox_uniform_at(a, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    if (i < 1000) distinct.insert(u);
  }
  EXPECT_NEAR(sum / n, 0.5, 0.01);
  EXPECT_GT(distinct.size(), 990u);
  int same_site = 0, same_offset = 0;
  for (int i = 0; i < 1000; ++i) {
    same_site += philox_uniform_at(a, i) == philox_uniform_at(b, i);
    same_offset += philox_uniform_at(a, i) == philox_uniform_at(c, i);
  }
  EXPECT_LT(same_site, 5);
  EXPECT_LT(same_offset, 5);
  // Element i is word i%4 of block i/4.
  EXPECT_EQ(philox_uniform_at(a, 7), philox_uniform(philox_block(a, 1).v[3]));
  // philox_word (the kernels' register-only pick) is the indexed word, for every j % 4.
  const Philox4 r = philox_block(a, 5);
  for (uint64_t j = 0; j < 12; ++j) EXPECT_EQ(philox_word(r, j), r.v[j & 3]) << j;
  for (int i = 0; i < 64; ++i)
    EXPECT_EQ(philox_uniform_at(a, i), philox_uniform(philox_block(a, i / 4).v[i % 4])) << i;
}

}  // namespace
}  // namespace ftune
