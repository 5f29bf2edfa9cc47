// A read-mostly hash map from token strings to ids, the hot lookup of every model.
//
// Open addressing with linear probing over one contiguous string pool: a lookup hashes the key
// once and usually touches one cache line of slots plus the pool, with no allocation.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace ftune::text {

// 64-bit hash of a byte string (multiply-xorshift over 8-byte words; not cryptographic).
inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ (w * 0x87C37B91114253D5ull)) * 0x4CF5AD432745937Full;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  uint64_t w = 0;
  if (n) std::memcpy(&w, p, n);
  h = (h ^ (w * 0x87C37B91114253D5ull)) * 0x4CF5AD432745937Full;
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return h;
}

// a[0, n) == b[0, n), inlined for the short keys of vocabularies (memcmp is a library call).
inline bool bytes_equal(const char* a, const char* b, size_t n) {
  if (n >= 8) {
    uint64_t x, y;
    for (size_t i = 0; i + 8 <= n; i += 8) {
      std::memcpy(&x, a + i, 8);
      std::memcpy(&y, b + i, 8);
      if (x != y) return false;
    }
    std::memcpy(&x, a + n - 8, 8);  // the last 8 bytes (overlapping the loop's last word)
    std::memcpy(&y, b + n - 8, 8);
    return x == y;
  }
  if (n >= 4) {
    uint32_t x0, y0, x1, y1;
    std::memcpy(&x0, a, 4);
    std::memcpy(&y0, b, 4);
    std::memcpy(&x1, a + n - 4, 4);
    std::memcpy(&y1, b + n - 4, 4);
    return x0 == y0 && x1 == y1;
  }
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

class StringIdMap {
 public:
  static constexpr uint32_t kMissing = UINT32_MAX;

  // Inserts or overwrites (the last value for a key wins, as when HF collects a JSON map).
  void set(std::string_view key, uint32_t id);
  // The id of `key`, or kMissing.
  uint32_t find(std::string_view key) const {
    if (slots_.empty()) return kMissing;
    const uint64_t h = hash_bytes(key.data(), key.size());
    size_t i = h & mask_;
    while (true) {
      const Slot& s = slots_[i];
      if (s.len == kEmpty) return kMissing;
      if (s.hash == h && s.len == key.size() &&
          bytes_equal(pool_.data() + s.offset, key.data(), key.size()))
        return s.id;
      i = (i + 1) & mask_;
    }
  }
  bool contains(std::string_view key) const { return find(key) != kMissing; }
  size_t size() const { return count_; }
  void clear() {
    slots_.clear();
    pool_.clear();
    mask_ = 0;
    count_ = 0;
  }

  // Calls f(key, id) for every entry (in no particular order).
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.len != kEmpty) f(std::string_view(pool_.data() + s.offset, s.len), s.id);
  }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0;
    uint32_t len = kEmpty;
    uint32_t id = 0;
  };
  void grow();

  std::vector<Slot> slots_;
  std::string pool_;
  size_t mask_ = 0;
  size_t count_ = 0;
};

}  // namespace ftune::text
