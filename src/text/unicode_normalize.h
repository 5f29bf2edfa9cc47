// Unicode normalization forms (NFC, NFD, NFKC, NFKD) as HF `tokenizers` applies them.
//
// HF uses the crate unicode-normalization-alignments, whose tables are Unicode 9.0. ICU's
// normalizers (current Unicode) are wrapped in a FilteredNormalizer2 limited to characters
// assigned by Unicode 9.0: later characters pass through unchanged and stop composition across
// them, which is exactly what 9.0-era tables do (normalization stability guarantees that the
// mappings of older characters never changed).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ftune::text {

enum class NormForm { kNFC, kNFD, kNFKC, kNFKD };

// Appends the normalized form of `in` (valid UTF-8) to `out`.
void normalize_unicode(NormForm form, std::string_view in, std::string& out);

}  // namespace ftune::text

namespace ftune::text {

// The origin prefix (see pretokenized.h) after normalizing `in` to `out` with `form`, given the
// prefix `in_prefix` of `in`: the normalized length of that prefix, moved forward to a character
// boundary of `out`. Exact unless normalization reorders or composes across the prefix end.
uint32_t normalized_origin_prefix(NormForm form, std::string_view in, uint32_t in_prefix,
                                  std::string_view out);

}  // namespace ftune::text
