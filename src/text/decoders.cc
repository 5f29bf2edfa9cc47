// The decoders of HF tokenizers/src/decoders (see decoder.h).
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/byte_level_alphabet.h"
#include "text/decoder.h"
#include "text/regex.h"
#include "text/utf8.h"

namespace ftune::text {

namespace {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t at = s.find(from, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out.append(to);
    pos = at + from.size();
  }
  if (pos == 0) return;
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

// decoders/wordpiece.rs cleanup(): undo the spaces tokenization puts around punctuation.
void cleanup(std::string& s) {
  replace_all(s, " .", ".");
  replace_all(s, " ?", "?");
  replace_all(s, " !", "!");
  replace_all(s, " ,", ",");
  replace_all(s, " ' ", "'");
  replace_all(s, " n't", "n't");
  replace_all(s, " 'm", "'m");
  replace_all(s, " do not", " don't");
  replace_all(s, " 's", "'s");
  replace_all(s, " 've", "'ve");
  replace_all(s, " 're", "'re");
}

class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t mark = bytes.size();
      bool ok = true;
      for (size_t i = 0; i < t.size() && ok;) {
        const int b = byte_level_byte(utf8_next(t, i));
        if (b < 0)
          ok = false;
        else
          bytes.push_back(static_cast<char>(b));
      }
      if (!ok) {
        bytes.resize(mark);
        bytes.append(t);
      }
    }
    tokens.assign(1, utf8_sanitize(bytes));
  }
};

class WordPieceDecoder final : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup)
      : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0)
          t.erase(0, prefix_.size());
        else
          t = std::string(1, ' ') + t;
      }
      if (cleanup_) cleanup(t);
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool prepend)
      : replacement_(replacement), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t k = 0; k < t.size();) {
        const char32_t c = utf8_next(t, k);
        if (c == replacement_) {
          if (!(i == 0 && prepend_)) out.push_back(' ');
        } else {
          utf8_append(out, c);
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  char32_t replacement_;
  bool prepend_;
};

class BpeDecoder final : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i)
      replace_all(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
  }

 private:
  std::string suffix_;
};

class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (utf8_find_invalid(pending) == std::string::npos) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& t : tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>')
        byte = parse_hex_byte(t.substr(3, 2));
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }

 private:
  // Rust u8::from_str_radix(s, 16): an optional '+' then hex digits.
  static int parse_hex_byte(const std::string& s) {
    size_t i = 0;
    if (!s.empty() && s[0] == '+') i = 1;
    if (i >= s.size()) return -1;
    int v = 0;
    for (; i < s.size(); ++i) {
      const char c = s[i];
      int d;
      if (c >= '0' && c <= '9')
        d = c - '0';
      else if (c >= 'a' && c <= 'f')
        d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        d = c - 'A' + 10;
      else
        return -1;
      v = v * 16 + d;
    }
    return v <= 255 ? v : -1;
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<char32_t> chars;
      for (size_t i = 0; i < t.size();) chars.push_back(utf8_next(t, i));
      size_t start_cut = 0;
      for (size_t i = 0; i < std::min(start_, chars.size()); ++i) {
        if (chars[i] != content_) break;
        start_cut = i + 1;
      }
      size_t stop_cut = chars.size();
      for (size_t i = 0; i < stop_ && i < chars.size(); ++i) {
        const size_t index = chars.size() - i - 1;
        if (chars[index] != content_) break;
        stop_cut = index;
      }
      std::string out;
      for (size_t i = start_cut; i < stop_cut; ++i) utf8_append(out, chars[i]);
      t = std::move(out);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<Match> matches;
    for (std::string& t : tokens) {
      matches.clear();
      pattern_.find_all(t, matches);
      if (matches.empty()) continue;
      std::string out;
      size_t last = 0;
      for (const Match& m : matches) {
        out.append(t, last, m.first - last);
        out.append(content_);
        last = m.second;
      }
      out.append(t, last, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  Regex pattern_;
  std::string content_;
};

class CtcDecoder final : public Decoder {
 public:
  CtcDecoder(std::string pad, std::string delimiter, bool cleanup)
      : pad_(std::move(pad)), delimiter_(std::move(delimiter)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0 && tokens[i] == tokens[i - 1]) continue;  // dedup consecutive
      std::string t = tokens[i];
      replace_all(t, pad_, "");
      if (cleanup_) {
        cleanup(t);
        replace_all(t, delimiter_, " ");
      }
      if (!t.empty()) out.push_back(std::move(t));
    }
    tokens.swap(out);
  }

 private:
  std::string pad_, delimiter_;
  bool cleanup_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> members)
      : members_(std::move(members)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& m : members_) m->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> members_;
};

char32_t single_char(const JsonNode& node) {
  const std::string s = node.as_string();
  if (s.empty() || utf8_count(s) != 1) node.fail("a single character");
  size_t i = 0;
  return utf8_next(s, i);
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const JsonNode& node) {
  if (!node.is_object()) node.fail("an object with a \"type\"");
  const std::string type = node.at("type").as_string();
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "WordPiece")
    return std::make_unique<WordPieceDecoder>(node.string_or("prefix", "##"),
                                              node.bool_or("cleanup", true));
  if (type == "Metaspace") {
    bool prepend = node.string_or("prepend_scheme", "always") != "never";
    if (auto a = node.get("add_prefix_space"); a && !a->as_bool()) prepend = false;
    return std::make_unique<MetaspaceDecoder>(single_char(node.at("replacement")), prepend);
  }
  if (type == "BPEDecoder") return std::make_unique<BpeDecoder>(node.string_or("suffix", "</w>"));
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    const int64_t start = node.int_or("start", 0), stop = node.int_or("stop", 0);
    if (start < 0 || stop < 0) node.fail_msg("start and stop must be non-negative");
    return std::make_unique<StripDecoder>(single_char(node.at("content")),
                                          static_cast<size_t>(start), static_cast<size_t>(stop));
  }
  if (type == "Replace")
    return std::make_unique<ReplaceDecoder>(make_pattern(node.at("pattern")),
                                            node.at("content").as_string());
  if (type == "CTC")
    return std::make_unique<CtcDecoder>(node.string_or("pad_token", "<pad>"),
                                        node.string_or("word_delimiter_token", "|"),
                                        node.bool_or("cleanup", true));
  if (type == "Sequence") {
    const JsonNode list = node.at("decoders");
    std::vector<std::unique_ptr<Decoder>> members;
    for (size_t i = 0; i < list.size(); ++i) members.push_back(make_decoder(list[i]));
    return std::make_unique<SequenceDecoder>(std::move(members));
  }
  node.at("type").fail_msg("unknown decoder type \"" + type + "\"");
}

}  // namespace ftune::text
