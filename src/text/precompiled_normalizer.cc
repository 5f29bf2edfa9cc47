// Precompiled: SentencePiece's normalization rules ("precompiled_charsmap", carried by XLM-R,
// DeBERTa-v3, T5, ...), interpreted exactly as HF's spm_precompiled crate does.
//
// The charsmap is [u32 trie size in bytes][darts-clone double array of u32][NUL-separated
// replacement strings]. HF walks the text by extended grapheme cluster: a cluster shorter than 6
// bytes is looked up whole; otherwise (or when that finds nothing) each character is looked up on
// its own. A lookup is a common-prefix search of the trie that returns the *first* (shortest)
// entry matching a prefix of the key, and its replacement stands for the whole key. Malformed
// charsmaps raise InputError at load; a trie index out of range at run time counts as no match.
#include <utf8proc.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/normalizer.h"
#include "text/utf8.h"

namespace ftune::text {

namespace {

std::vector<uint8_t> base64_decode(const std::string& s, const JsonNode& where) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (s.size() % 4 != 0)
    where.fail_msg("precompiled_charsmap is not valid base64 (length not a multiple of 4)");
  std::vector<uint8_t> out;
  out.reserve(s.size() / 4 * 3);
  for (size_t i = 0; i < s.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s[i + k];
      if (c == '=' && i + 4 == s.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else {
        v[k] = value(c);
        if (v[k] < 0 || pad > 0) where.fail_msg("precompiled_charsmap is not valid base64");
      }
    }
    const uint32_t n = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out.push_back(static_cast<uint8_t>(n >> 16));
    if (pad < 2) out.push_back(static_cast<uint8_t>(n >> 8));
    if (pad < 1) out.push_back(static_cast<uint8_t>(n));
  }
  return out;
}

class Precompiled final : public Normalizer {
 public:
  explicit Precompiled(const JsonNode& node) {
    const JsonNode map = node.at("precompiled_charsmap");
    const std::vector<uint8_t> bytes = base64_decode(map.as_string(), map);
    if (bytes.size() < 4) map.fail_msg("precompiled_charsmap is too short to hold its trie size");
    uint32_t trie_size = 0;
    std::memcpy(&trie_size, bytes.data(), 4);  // little-endian (x86 and ARM hosts)
    const size_t units = trie_size / 4;
    if (units > (bytes.size() - 4) / 4)
      map.fail_msg("precompiled_charsmap: trie size " + std::to_string(trie_size) +
                   " exceeds the data");
    array_.resize(units);
    if (units > 0) std::memcpy(array_.data(), bytes.data() + 4, units * 4);
    normalized_.assign(reinterpret_cast<const char*>(bytes.data()) + 4 + units * 4,
                       bytes.size() - 4 - units * 4);
    if (utf8_find_invalid(normalized_) != std::string::npos)
      map.fail_msg("precompiled_charsmap: replacement strings are not valid UTF-8");
  }

  void normalize(std::string_view in, uint32_t& origin_prefix, std::string& out) const override {
    // HF's transformation list: (character, change) with change 0 = replaces one input character,
    // 1 = inserted, -k = replaces one and removes k more.
    auto& trans = transformations();
    trans.clear();
    bool modified = false;
    utf8proc_int32_t state = 0;  // carried across clusters (regional indicators, emoji ZWJ)
    size_t g = 0;
    while (g < in.size()) {
      // Extended grapheme cluster [g, e).
      size_t e = g;
      char32_t prev = utf8_next(in, e);
      while (e < in.size()) {
        size_t k = e;
        const char32_t c = utf8_next(in, k);
        if (utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev),
                                             static_cast<utf8proc_int32_t>(c), &state))
          break;
        prev = c;
        e = k;
      }
      const std::string_view grapheme = in.substr(g, e - g);
      std::optional<std::string_view> norm;
      if (grapheme.size() < 6) norm = transform(grapheme);
      if (norm) {
        modified = true;
        replace(grapheme, *norm);
      } else {
        for (size_t i = 0; i < grapheme.size();) {
          const size_t at = i;
          const char32_t c = utf8_next(grapheme, i);
          const std::string_view part = grapheme.substr(at, i - at);
          if (auto n = transform(part)) {
            modified = true;
            replace(part, *n);
          } else {
            trans.emplace_back(c, 0);
          }
        }
      }
      g = e;
    }
    if (!modified) {
      out.append(in);
      return;
    }
    const size_t base = out.size();
    for (const auto& t : trans) utf8_append(out, t.first);
    origin_prefix = simulate_prefix(in, origin_prefix, base, out);
  }

 private:
  // spm_precompiled::Precompiled::transform: first (shortest) prefix entry of the trie.
  std::optional<std::string_view> transform(std::string_view key) const {
    if (array_.empty()) return std::nullopt;
    auto offset = [](uint32_t u) -> size_t { return (u >> 10) << ((u & (1u << 9)) >> 6); };
    auto label = [](uint32_t u) -> uint32_t { return u & ((1u << 31) | 0xFF); };
    auto has_leaf = [](uint32_t u) { return ((u >> 8) & 1) == 1; };
    auto value = [](uint32_t u) -> size_t { return u & ((1u << 31) - 1); };
    size_t node = 0;
    uint32_t unit = array_[node];
    node ^= offset(unit);
    for (unsigned char c : key) {
      if (c == 0) break;
      node ^= c;
      if (node >= array_.size()) return std::nullopt;
      unit = array_[node];
      if (label(unit) != c) return std::nullopt;
      node ^= offset(unit);
      if (has_leaf(unit)) {
        if (node >= array_.size()) return std::nullopt;
        return normalized_at(value(array_[node]));
      }
    }
    return std::nullopt;
  }

  std::optional<std::string_view> normalized_at(size_t index) const {
    if (index > normalized_.size()) return std::nullopt;
    if (index < normalized_.size() &&
        (static_cast<unsigned char>(normalized_[index]) & 0xC0) == 0x80)
      return std::nullopt;
    size_t end = normalized_.find('\0', index);
    if (end == std::string::npos) end = normalized_.size();
    return std::string_view(normalized_).substr(index, end - index);
  }

  // precompiled.rs `replace`: record `new_part` replacing `old_part` in the transformation list.
  static void replace(std::string_view old_part, std::string_view new_part) {
    auto& trans = transformations();
    const auto old_count = static_cast<long>(utf8_count(old_part));
    const auto new_count = static_cast<long>(utf8_count(new_part));
    const long diff = new_count - old_count;
    for (size_t i = 0; i < new_part.size();) trans.emplace_back(utf8_next(new_part, i), 0);
    if (diff > 0) {
      for (long k = 0; k < diff; ++k) trans[trans.size() - 1 - k].second = 1;
    } else if (diff < 0 && !trans.empty()) {
      trans.back().second += static_cast<int>(diff);
    }
  }

  static std::vector<std::pair<char32_t, int>>& transformations();

  // Replays HF's NormalizedString::transform over the input characters to find how many output
  // bytes stay aligned to original offset 0 (characters consume input characters in order).
  static uint32_t simulate_prefix(std::string_view in, uint32_t in_prefix, size_t base,
                                  const std::string& out) {
    if (in_prefix == 0) return 0;
    const auto& trans = transformations();
    size_t offset = 0;  // bytes of input consumed
    size_t produced = 0;
    for (const auto& [c, change] : trans) {
      bool in_pref;
      if (change > 0) {
        in_pref = offset == 0 ? true : offset - 1 < in_prefix;
      } else {
        in_pref = offset < in_prefix;
        if (offset < in.size()) offset += utf8_len(static_cast<unsigned char>(in[offset]));
        for (int k = 0; k < -change && offset < in.size(); ++k)
          offset += utf8_len(static_cast<unsigned char>(in[offset]));
      }
      if (!in_pref) break;
      produced += utf8_encoded_len(c);
    }
    return static_cast<uint32_t>(std::min(produced, out.size() - base));
  }

  std::vector<uint32_t> array_;
  std::string normalized_;
};

std::vector<std::pair<char32_t, int>>& Precompiled::transformations() {
  thread_local std::vector<std::pair<char32_t, int>> trans;
  return trans;
}

}  // namespace

std::unique_ptr<Normalizer> make_precompiled_normalizer(const JsonNode& node) {
  return std::make_unique<Precompiled>(node);
}

}  // namespace ftune::text
