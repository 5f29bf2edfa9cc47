// A flat hash map from 64-bit keys to 64-bit values (BPE merge pairs, Unigram trie edges).
// Open addressing with linear probing; key UINT64_MAX is reserved as "empty".
#pragma once

#include <cstdint>
#include <vector>

namespace ftune::text {

class U64Map {
 public:
  static constexpr uint64_t kMissing = UINT64_MAX;

  void set(uint64_t key, uint64_t value) {
    if ((count_ + 1) * 2 > slots_.size()) grow();
    size_t i = mix(key) & mask_;
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    if (slots_[i].key == kEmpty) ++count_;
    slots_[i] = {key, value};
  }
  uint64_t find(uint64_t key) const {
    if (slots_.empty()) return kMissing;
    size_t i = mix(key) & mask_;
    while (true) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.value;
      if (s.key == kEmpty) return kMissing;
      i = (i + 1) & mask_;
    }
  }
  size_t size() const { return count_; }

 private:
  static constexpr uint64_t kEmpty = UINT64_MAX;
  struct Slot {
    uint64_t key = kEmpty;
    uint64_t value = 0;
  };
  static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    k ^= k >> 33;
    return k;
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.empty() ? 16 : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.key == kEmpty) continue;
      size_t i = mix(s.key) & mask_;
      while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t count_ = 0;
};

}  // namespace ftune::text
