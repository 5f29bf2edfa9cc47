// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. The same (key, counter) gives the same four 32-bit words on every
// backend and thread, so a dropout mask depends only on (seed, site, step, element) — not
// on thread count, kernel launch shape or device. Compiles for host and CUDA.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace ftune {

struct Philox4 {
  uint32_t v[4];
};

FTUNE_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

// Ten rounds of Philox4x32 on counter c with key k.
FTUNE_HD Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kM0, c.v[0], &hi0, &lo0);
    philox_mulhilo(kM1, c.v[2], &hi1, &lo1);
    c = Philox4{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// Uniform in [0, 1) from the top 24 bits (exactly representable in f32).
FTUNE_HD float philox_uniform(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// Identifies one stream of random numbers: a run's seed, a site (which dropout in which layer)
// and an offset (the optimizer step, so every step draws fresh masks; within a step, elements are
// placed by their row in the step batch: ops/dropout.h).
//
// In a training step the offset and the micro-batch's first row can also come from device memory
// (`micro`, MicroParams below): a replayed CUDA graph keeps the kernel arguments it was captured
// with, so what changes between micro-batches of one shape must be read, not passed. Every
// consumer of a key calls resolve_micro() first (kernels on the device, ops' CPU branches on the
// host); with micro null the key's own values hold.
struct MicroParams;

struct RngKey {
  uint64_t seed = 0;
  uint32_t site = 0;
  uint32_t offset = 0;
  const MicroParams* micro = nullptr;  // when set: offset and row0 are read from it
};

// What differs between the micro-batches of a training step, in memory on the step's device (the
// input staging slot that carries the micro-batch, train/input_staging.h). 32 bytes, 8-aligned.
struct MicroParams {
  uint64_t row0 = 0;        // dropout: the micro-batch's first row in the step batch
  uint32_t offset = 0;      // dropout: the optimizer step (RngKey::offset)
  float grad_scale = 1.0f;  // backward: the micro-batch's share of the step loss x the loss scale
  double loss_share = 1.0;  // step loss: the micro-batch's share of the step loss
  uint64_t reserved = 0;
};

// Replaces the key's offset and `row0` by those of *key.micro (when set) and clears micro, so a
// resolved key is a plain value.
FTUNE_HD void resolve_micro(RngKey& key, uint64_t& row0) {
  if (key.micro == nullptr) return;
  key.offset = key.micro->offset;
  row0 = key.micro->row0;
  key.micro = nullptr;
}

// Four uniforms for elements [4*group, 4*group + 4) of the stream.
FTUNE_HD Philox4 philox_block(RngKey key, uint64_t group) {
  Philox4 c{
      {static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32), key.site, key.offset}};
  return philox4x32_10(c, static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32));
}

// Word j % 4 of a block, by selects rather than an indexed load: a run-time index into r.v puts
// the block in local memory on the GPU (a 16-byte stack frame in every dropout and attention
// kernel); the selects keep it in registers. The same word either way.
FTUNE_HD uint32_t philox_word(const Philox4& r, uint64_t j) {
  const uint32_t lo = (j & 1) ? r.v[1] : r.v[0], hi = (j & 1) ? r.v[3] : r.v[2];
  return (j & 2) ? hi : lo;
}

// Uniform for element i of the stream (one Philox evaluation; kernels that handle four
// consecutive elements call philox_block once instead).
FTUNE_HD float philox_uniform_at(RngKey key, uint64_t i) {
  return philox_uniform(philox_word(philox_block(key, i >> 2), i));
}

}  // namespace ftune
