// OpenBLAS's kernel table on CPUs it does not know (core/openblas_core.h): a table without AVX2 is
// replaced by the one the CPU's instruction set supports, any other choice is kept.
#include "core/openblas_core.h"

#include <gtest/gtest.h>

namespace ftune {
namespace {

TEST(OpenblasCore, AnSse3FallbackOnAnAvx512CpuGetsTheSkylakeXTable) {
  EXPECT_EQ(openblas_core_upgrade("Prescott", true, true), "SkylakeX");
  EXPECT_EQ(openblas_core_upgrade("prescott", true, true), "SkylakeX");
  EXPECT_EQ(openblas_core_upgrade("Nehalem", true, true), "SkylakeX");
}

TEST(OpenblasCore, APreAvx2TableOnAnAvx2CpuGetsTheHaswellTable) {
  EXPECT_EQ(openblas_core_upgrade("Prescott", false, true), "Haswell");
  EXPECT_EQ(openblas_core_upgrade("Sandybridge", false, true), "Haswell");
  EXPECT_EQ(openblas_core_upgrade("Bulldozer", false, true), "Haswell");
}

TEST(OpenblasCore, ATableOfTheCpusOwnGenerationIsKept) {
  for (const char* core : {"Haswell", "SkylakeX", "Cooperlake", "Zen", "SapphireRapids"})
    EXPECT_EQ(openblas_core_upgrade(core, true, true), "") << core;
  // A CPU without AVX2 keeps whatever OpenBLAS chose.
  EXPECT_EQ(openblas_core_upgrade("Prescott", false, false), "");
  EXPECT_EQ(openblas_core_upgrade("Sandybridge", false, false), "");
}

}  // namespace
}  // namespace ftune
