// OpenBLAS's kernel table on CPUs it does not know (see openblas_core.h).
#include "core/openblas_core.h"

#include <algorithm>
#include <array>
#include <cctype>

extern "C" char* openblas_get_corename();

namespace ftune {

std::string openblas_core_upgrade(const std::string& chosen, bool avx512, bool avx2_fma) {
  // OpenBLAS's x86-64 tables whose SGEMM kernels use neither AVX2 nor AVX-512.
  static constexpr std::array<const char*, 19> kPreAvx2 = {
      "prescott", "core2",     "penryn",   "dunnington", "nehalem",   "atom",     "sandybridge",
      "katmai",   "coppermine", "northwood", "banias",    "athlon",    "opteron",  "opteron_sse3",
      "barcelona", "bobcat",   "bulldozer", "piledriver", "nano"};
  std::string name = chosen;
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const bool old_table =
      std::find(kPreAvx2.begin(), kPreAvx2.end(), name) != kPreAvx2.end();
  if (!old_table) return "";
  if (avx512) return "SkylakeX";
  if (avx2_fma) return "Haswell";
  return "";
}

std::string openblas_core_upgrade_here() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return openblas_core_upgrade(openblas_get_corename(), avx512, avx2_fma);
#else
  return "";
#endif
}

}  // namespace ftune
