// Dropout on the CPU. Philox words are generated for a block of groups at a time in a loop the
// compiler vectorises, then turned into multipliers and applied in a second vectorised loop;
// every element's multiplier depends only on its stream index (ops/dropout.h), so it is the same
// word as on any other backend, whatever the blocking or the thread count.
#include <algorithm>

#include "core/thread_pool.h"
#include "ops/dropout.h"

namespace ftune::cpu {
namespace {

constexpr int64_t kGroupsPerBlock = 256;  // 1024 elements

// words[4g + k] = word k of Philox block (first_group + g), for g in [0, groups).
void philox_words(uint32_t* __restrict words, RngKey key, uint64_t first_group, int64_t groups) {
  const uint32_t k0 = static_cast<uint32_t>(key.seed), k1 = static_cast<uint32_t>(key.seed >> 32);
#pragma omp simd
  for (int64_t g = 0; g < groups; ++g) {
    const Philox4 r = philox4x32_10(
        Philox4{{static_cast<uint32_t>(first_group + g),
                 static_cast<uint32_t>((first_group + g) >> 32), key.site, key.offset}},
        k0, k1);
    for (int k = 0; k < 4; ++k) words[4 * g + k] = r.v[k];
  }
}

}  // namespace

void dropout_multipliers(float* m, RngKey rng, uint64_t first, int64_t n, float p) {
  const float scale = 1.0f / (1.0f - p);
  uint32_t words[4 * kGroupsPerBlock];
  int64_t done = 0;
  while (done < n) {
    const uint64_t e = first + static_cast<uint64_t>(done);
    const uint64_t group = e >> 2;
    const int64_t skip = static_cast<int64_t>(e & 3);  // elements of the first group before `e`
    const int64_t count = std::min<int64_t>(n - done, 4 * kGroupsPerBlock - skip);
    philox_words(words, rng, group, (skip + count + 3) / 4);
    const uint32_t* w = words + skip;
    float* out = m + done;
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) out[i] = philox_uniform(w[i]) >= p ? scale : 0.0f;
    done += count;
  }
}

void dropout_apply(float* out, const float* inp, int64_t n, float p, RngKey rng, DropoutRuns runs) {
  resolve_micro(rng, runs);
  if (p == 0.0f) {
    if (out != inp)
      parallel_for(
          n, [&](int64_t b, int64_t e) { std::copy(inp + b, inp + e, out + b); }, 4096);
    return;
  }
  const int64_t block = 4 * kGroupsPerBlock;
  parallel_for((n + block - 1) / block,
               [&](int64_t b0, int64_t b1) {
                 float m[4 * kGroupsPerBlock];
                 for (int64_t b = b0; b < b1; ++b) {
                   const int64_t start = b * block, count = std::min(block, n - start);
                   // A block may span sequences: each piece within one is a run of the stream.
                   for (int64_t done = 0; done < count;) {
                     const int64_t e = start + done;
                     const int64_t piece = std::min(count - done, dropout_run_left(runs, e));
                     dropout_multipliers(m + done, rng, dropout_stream_index(runs, e), piece, p);
                     done += piece;
                   }
#pragma omp simd
                   for (int64_t i = 0; i < count; ++i) out[start + i] = inp[start + i] * m[i];
                 }
               },
               4);
}

}  // namespace ftune::cpu
