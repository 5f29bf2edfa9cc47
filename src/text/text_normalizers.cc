// Normalizers that edit text literally: Replace (a string or an Oniguruma regex), Prepend, Strip
// (leading/trailing whitespace) and ByteLevel (bytes to GPT-2 characters).
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/byte_level_alphabet.h"
#include "text/normalizer.h"
#include "text/regex.h"
#include "text/unicode_props.h"
#include "text/utf8.h"

namespace ftune::text {

namespace {

class Replace final : public Normalizer {
 public:
  Replace(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}

  void normalize(std::string_view in, uint32_t& origin_prefix, std::string& out) const override {
    thread_local std::vector<Match> matches;
    matches.clear();
    pattern_.find_all(in, matches);
    const size_t base = out.size();
    uint32_t prefix = 0;
    bool open = true;
    size_t last = 0;
    // Text between matches keeps its own alignment; a replacement takes the alignment of the
    // last character it replaces (of the character before it, for an empty match).
    auto copy_until = [&](size_t to) {
      if (open && last < origin_prefix) {
        out.append(in.substr(last, std::min<size_t>(to, origin_prefix) - last));
        prefix = static_cast<uint32_t>(out.size() - base);
        if (to > origin_prefix) {
          open = false;
          out.append(in.substr(origin_prefix, to - origin_prefix));
        }
      } else {
        if (to > last) open = false;
        out.append(in.substr(last, to - last));
      }
    };
    for (const Match& m : matches) {
      copy_until(m.first);
      const size_t source = m.second;  // one past the last replaced byte
      const bool in_prefix = open && (source == 0 ? origin_prefix > 0 : source - 1 < origin_prefix);
      out.append(content_);
      if (in_prefix)
        prefix = static_cast<uint32_t>(out.size() - base);
      else if (!content_.empty())
        open = false;
      last = m.second;
    }
    copy_until(in.size());
    origin_prefix = prefix;
  }

 private:
  Regex pattern_;
  std::string content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string_view in, uint32_t& origin_prefix, std::string& out) const override {
    if (!in.empty()) {
      out.append(prefix_);
      // The prepended characters take the alignment of the first character.
      if (origin_prefix > 0) origin_prefix += static_cast<uint32_t>(prefix_.size());
    }
    out.append(in);
  }

 private:
  std::string prefix_;
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string_view in, uint32_t& origin_prefix, std::string& out) const override {
    size_t b = 0, e = in.size();
    if (left_) {
      size_t i = 0;
      while (i < e) {
        if (!unicode::is_whitespace(utf8_next(in, i))) break;
        b = i;
      }
    }
    if (right_) {
      size_t i = e;
      while (i > b) {
        size_t j = i;
        if (!unicode::is_whitespace(utf8_prev(in, j))) break;
        i = j;
        e = i;
      }
    }
    out.append(in.substr(b, e - b));
    // Kept characters keep their alignment: the prefix survives only if nothing was cut before it.
    origin_prefix = b == 0 ? static_cast<uint32_t>(std::min<size_t>(origin_prefix, e)) : 0;
  }

 private:
  bool left_, right_;
};

class ByteLevelNormalizer final : public Normalizer {
 public:
  void normalize(std::string_view in, uint32_t& origin_prefix, std::string& out) const override {
    const auto& chars = byte_level_chars();
    const size_t base = out.size();
    uint32_t prefix = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      out.append(chars[static_cast<unsigned char>(in[i])]);
      if (i < origin_prefix) prefix = static_cast<uint32_t>(out.size() - base);
    }
    origin_prefix = prefix;
  }
};

}  // namespace

std::unique_ptr<Normalizer> make_replace_normalizer(const JsonNode& node) {
  return std::make_unique<Replace>(make_pattern(node.at("pattern")),
                                   node.at("content").as_string());
}

std::unique_ptr<Normalizer> make_prepend_normalizer(const JsonNode& node) {
  return std::make_unique<Prepend>(node.at("prepend").as_string());
}

std::unique_ptr<Normalizer> make_strip_normalizer(const JsonNode& node) {
  return std::make_unique<Strip>(node.bool_or("strip_left", false),
                                 node.bool_or("strip_right", false));
}

std::unique_ptr<Normalizer> make_byte_level_normalizer() {
  return std::make_unique<ByteLevelNormalizer>();
}

}  // namespace ftune::text
