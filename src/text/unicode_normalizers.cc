// Normalizers that map characters by Unicode data: NFC, NFD, NFKC, NFKD, Lowercase, StripAccents
// (drops combining marks, Unicode 9.0, without decomposing first) and Nmt (SentencePiece's
// control-character clean-up: drops C0 controls and DEL, maps some spaces to ' ').
#include <memory>
#include <string>

#include "core/error.h"
#include "text/normalizer.h"
#include "text/unicode_normalize.h"
#include "text/unicode_props.h"
#include "text/utf8.h"

namespace ftune::text {

namespace {

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(NormForm form) : form_(form) {}
  void normalize(std::string_view in, uint32_t& origin_prefix, std::string& out) const override {
    const size_t base = out.size();
    normalize_unicode(form_, in, out);
    origin_prefix =
        normalized_origin_prefix(form_, in, origin_prefix, std::string_view(out).substr(base));
  }

 private:
  NormForm form_;
};

class Lowercase final : public Normalizer {
 public:
  void normalize(std::string_view in, uint32_t& origin_prefix, std::string& out) const override {
    PrefixTracker track(origin_prefix, out);
    for (size_t i = 0; i < in.size();) {
      const size_t at = i;
      unicode::append_lowercase(out, utf8_next(in, i));
      track.after(at);
    }
    origin_prefix = track.result();
  }
};

class StripAccents final : public Normalizer {
 public:
  void normalize(std::string_view in, uint32_t& origin_prefix, std::string& out) const override {
    PrefixTracker track(origin_prefix, out);
    for (size_t i = 0; i < in.size();) {
      const size_t at = i;
      const char32_t c = utf8_next(in, i);
      if (!(unicode::flags(c) & unicode::kCombiningMark)) utf8_append(out, c);
      track.after(at);
    }
    origin_prefix = track.result();
  }
};

class Nmt final : public Normalizer {
 public:
  void normalize(std::string_view in, uint32_t& origin_prefix, std::string& out) const override {
    PrefixTracker track(origin_prefix, out);
    for (size_t i = 0; i < in.size();) {
      const size_t at = i;
      char32_t c = utf8_next(in, i);
      const bool drop = (c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) ||
                        c == 0x7F || c == 0x8F || c == 0x9F;
      if (!drop) {
        if (c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 ||
            (c >= 0x200B && c <= 0x200F) || c == 0x2028 || c == 0x2029 || c == 0x2581 ||
            c == 0xFEFF || c == 0xFFFD)
          c = ' ';
        utf8_append(out, c);
      }
      track.after(at);
    }
    origin_prefix = track.result();
  }
};

}  // namespace

std::unique_ptr<Normalizer> make_unicode_normalizer(const std::string& type) {
  if (type == "NFC") return std::make_unique<UnicodeForm>(NormForm::kNFC);
  if (type == "NFD") return std::make_unique<UnicodeForm>(NormForm::kNFD);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(NormForm::kNFKC);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(NormForm::kNFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Nmt") return std::make_unique<Nmt>();
  return nullptr;
}

}  // namespace ftune::text
