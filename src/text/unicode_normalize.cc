// NFC/NFD/NFKC/NFKD at Unicode 9.0 through ICU (see unicode_normalize.h).
#include "text/unicode_normalize.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uniset.h>

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "text/utf8.h"

namespace ftune::text {

namespace {

struct Normalizers {
  std::unique_ptr<icu::UnicodeSet> unicode_9_0;
  std::unique_ptr<icu::FilteredNormalizer2> forms[4];
};

const Normalizers& normalizers() {
  static const Normalizers n = [] {
    Normalizers r;
    UErrorCode status = U_ZERO_ERROR;
    // [:age=9.0:] is cumulative in ICU: every code point assigned in Unicode 9.0 or earlier.
    r.unicode_9_0 = std::make_unique<icu::UnicodeSet>(icu::UnicodeString(u"[:age=9.0:]"), status);
    FTUNE_ASSERT(U_SUCCESS(status), "ICU UnicodeSet [:age=9.0:]: {}", u_errorName(status));
    r.unicode_9_0->freeze();
    const icu::Normalizer2* base[4] = {
        icu::Normalizer2::getNFCInstance(status), icu::Normalizer2::getNFDInstance(status),
        icu::Normalizer2::getNFKCInstance(status), icu::Normalizer2::getNFKDInstance(status)};
    FTUNE_ASSERT(U_SUCCESS(status), "ICU normalizer data: {}", u_errorName(status));
    for (int i = 0; i < 4; ++i)
      r.forms[i] = std::make_unique<icu::FilteredNormalizer2>(*base[i], *r.unicode_9_0);
    return r;
  }();
  return n;
}

}  // namespace

void normalize_unicode(NormForm form, std::string_view in, std::string& out) {
  if (is_ascii(in)) {  // ASCII is invariant under all four forms
    out.append(in);
    return;
  }
  const icu::FilteredNormalizer2& n = *normalizers().forms[static_cast<int>(form)];
  UErrorCode status = U_ZERO_ERROR;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(in.size()));
  n.normalizeUTF8(0, icu::StringPiece(in.data(), static_cast<int32_t>(in.size())), sink, nullptr,
                  status);
  FTUNE_ASSERT(U_SUCCESS(status), "ICU normalization failed: {}", u_errorName(status));
}

}  // namespace ftune::text

namespace ftune::text {

uint32_t normalized_origin_prefix(NormForm form, std::string_view in, uint32_t in_prefix,
                                  std::string_view out) {
  if (in_prefix == 0) return 0;
  if (in_prefix >= in.size()) return static_cast<uint32_t>(out.size());
  std::string head;
  normalize_unicode(form, in.substr(0, in_prefix), head);
  size_t n = std::min(head.size(), out.size());
  while (n < out.size() && (static_cast<unsigned char>(out[n]) & 0xC0) == 0x80) ++n;
  return static_cast<uint32_t>(n);
}

}  // namespace ftune::text
