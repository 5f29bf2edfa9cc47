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

// words[4g + k] = word k of Philox block (first_group + g), for g in [0, groups), groups at most
// kGroupsPerBlock. The counters are kept as four arrays (one lane per group) and the ten rounds
// run outside the loop over groups, so each round is one vectorised pass of 32 x 32 -> 64-bit
// multiplies (vpmuludq); GCC left philox4x32_10 on a Philox4 per group scalar (6.6 -> 1.7 ns an
// element on one core of the development machine; the same words).
void philox_words(uint32_t* __restrict words, RngKey key, uint64_t first_group, int64_t groups) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // as in core/philox.h
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  alignas(64) uint32_t c0[kGroupsPerBlock], c1[kGroupsPerBlock], c2[kGroupsPerBlock],
      c3[kGroupsPerBlock];
#pragma omp simd
  for (int64_t g = 0; g < groups; ++g) {
    c0[g] = static_cast<uint32_t>(first_group + g);
    c1[g] = static_cast<uint32_t>((first_group + g) >> 32);
    c2[g] = key.site;
    c3[g] = key.offset;
  }
  uint32_t k0 = static_cast<uint32_t>(key.seed), k1 = static_cast<uint32_t>(key.seed >> 32);
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int64_t g = 0; g < groups; ++g) {
      const uint64_t p0 = static_cast<uint64_t>(kM0) * c0[g];
      const uint64_t p1 = static_cast<uint64_t>(kM1) * c2[g];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[g] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[g] ^ k1;
      c0[g] = n0;
      c1[g] = static_cast<uint32_t>(p1);
      c2[g] = n2;
      c3[g] = static_cast<uint32_t>(p0);
    }
    k0 += kW0;
    k1 += kW1;
  }
#pragma omp simd
  for (int64_t g = 0; g < groups; ++g) {
    words[4 * g] = c0[g];
    words[4 * g + 1] = c1[g];
    words[4 * g + 2] = c2[g];
    words[4 * g + 3] = c3[g];
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

void dropout_element_multipliers(float* m, RngKey rng, const DropoutRuns& runs, int64_t e,
                                 int64_t n, float p) {
  // The elements may span sequences: each piece within one is a run of the stream.
  for (int64_t done = 0; done < n;) {
    const int64_t piece = std::min(n - done, dropout_run_left(runs, e + done));
    dropout_multipliers(m + done, rng, dropout_stream_index(runs, e + done), piece, p);
    done += piece;
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
                   dropout_element_multipliers(m, rng, runs, start, count, p);
#pragma omp simd
                   for (int64_t i = 0; i < count; ++i) out[start + i] = inp[start + i] * m[i];
                 }
               },
               4);
}

}  // namespace ftune::cpu
