// Fuzzes encoding with the committed fixture tokenizers: arbitrary bytes (invalid UTF-8 included)
// as text and pair, with truncation and padding options taken from the first bytes. Checks the
// invariants every Encoding must hold and that decoding never fails.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/tokenizer.h"

namespace {

std::vector<std::unique_ptr<ftune::text::Tokenizer>>& tokenizers() {
  static std::vector<std::unique_ptr<ftune::text::Tokenizer>> t;
  return t;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant failed: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string fx = std::string(FTUNE_SOURCE_DIR) + "/tests/fixtures/tokenizers/";
  for (const char* name : {"minilm", "roberta_bpe", "unigram_precompiled", "wordpiece_cased",
                           "pipeline_a", "pipeline_b", "pipeline_c"})
    tokenizers().push_back(
        std::make_unique<ftune::text::Tokenizer>(ftune::text::Tokenizer::from_path(fx + name)));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const auto& tok = *tokenizers()[data[0] % tokenizers().size()];
  const uint8_t flags = data[1], length = data[2];
  std::string_view rest(reinterpret_cast<const char*>(data + 3), size - 3);
  std::optional<std::string_view> pair;
  if (flags & 1) {
    const size_t cut = rest.find('\0');
    if (cut != std::string_view::npos) {
      pair = rest.substr(cut + 1);
      rest = rest.substr(0, cut);
    }
  }
  using namespace ftune::text;
  EncodeOptions o = tok.default_options();
  o.add_special_tokens = !(flags & 2);
  static const Truncation strategies[] = {Truncation::kNone, Truncation::kLongestFirst,
                                          Truncation::kOnlyFirst, Truncation::kOnlySecond};
  o.truncation = strategies[(flags >> 2) & 3];
  o.truncation_side = (flags & 16) ? Side::kLeft : Side::kRight;
  o.max_length = length % 64 + 1;
  o.padding = (flags & 32) ? Padding::kMaxLength : Padding::kNone;
  o.padding_side = (flags & 64) ? Side::kLeft : Side::kRight;
  o.pad_to_multiple_of = (flags & 128) ? 8 : 0;
  try {
    const Encoding e = tok.encode(rest, pair, o);
    check(e.type_ids.size() == e.ids.size() && e.attention_mask.size() == e.ids.size() &&
              e.special_tokens_mask.size() == e.ids.size(),
          "field sizes");
    const size_t specials = o.add_special_tokens ? tok.num_special_tokens(pair.has_value()) : 0;
    if (o.truncation != Truncation::kNone && static_cast<size_t>(o.max_length) >= specials) {
      size_t real = 0;
      for (uint8_t a : e.attention_mask) real += a;
      check(real <= static_cast<size_t>(o.max_length), "truncated length");
    }
    for (uint32_t id : e.ids) check(tok.id_to_token(id).has_value(), "every id has a token");
    (void)tok.decode(e.ids, flags & 1);
  } catch (const ftune::InputError&) {
    // only_second without a pair, or a sequence too short for only_first / only_second
  }
  return 0;
}
