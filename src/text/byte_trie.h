// A trie over byte strings with prefix searches: WordPiece's longest match and Unigram's
// lattice both ask "which vocabulary entries start here?" and walk the text once per position
// instead of hashing every candidate substring.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "text/u64_map.h"

namespace ftune::text {

class ByteTrie {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  ByteTrie() {
    values_.push_back(kNone);
    root_.fill(kNone);
  }

  // Maps `key` (non-empty) to `value`; a later insert of the same key wins.
  void insert(std::string_view key, uint32_t value) {
    uint32_t node = 0;
    for (unsigned char b : key) {
      uint32_t next = child(node, b);
      if (next == kNone) {
        next = static_cast<uint32_t>(values_.size());
        values_.push_back(kNone);
        if (node == 0)
          root_[b] = next;
        else
          edges_.set((uint64_t(node) << 8) | b, next);
      }
      node = next;
    }
    if (node != 0) values_[node] = value;
  }

  // Calls f(length, value) for every key that is a prefix of `s`, shortest first.
  template <class F>
  void for_each_prefix(std::string_view s, F&& f) const {
    uint32_t node = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      node = child(node, static_cast<unsigned char>(s[i]));
      if (node == kNone) return;
      if (values_[node] != kNone) f(i + 1, values_[node]);
    }
  }

  // Length of the longest key that is a prefix of `s` (0 if none), its value in `value`.
  size_t longest_prefix(std::string_view s, uint32_t& value) const {
    size_t best = 0;
    for_each_prefix(s, [&](size_t len, uint32_t v) {
      best = len;
      value = v;
    });
    return best;
  }

  size_t num_nodes() const { return values_.size(); }

 private:
  uint32_t child(uint32_t node, unsigned char b) const {
    if (node == 0) return root_[b];
    const uint64_t c = edges_.find((uint64_t(node) << 8) | b);
    return c == U64Map::kMissing ? kNone : static_cast<uint32_t>(c);
  }

  std::vector<uint32_t> values_;  // per node: the value of the key ending here, or kNone
  std::array<uint32_t, 256> root_;
  U64Map edges_;  // (node << 8 | byte) -> child, for nodes below the root
};

}  // namespace ftune::text
