// ftune's tokenizer: loads a Hugging Face tokenizer.json (plus tokenizer_config.json when present)
// and turns text into exactly the ids HF produces.
//
//   auto tok = ftune::text::Tokenizer::from_dir("models/all-MiniLM-L6-v2");
//   Encoding e = tok.encode("A man is eating.", "Someone eats.");   // [CLS] .. [SEP] .. [SEP]
//   auto batch = tok.encode_batch(pairs, tok.default_options());   // threads of compute_pool()
//
// Defaults reproduce transformers' `tokenizer(text, text_pair)` on a fast tokenizer: special
// tokens added, no truncation, no padding. transformers ignores the "truncation" and "padding"
// blocks stored in tokenizer.json for that call; `tokenizers_options()` returns them for callers
// that want `tokenizers.Tokenizer.encode` behaviour instead. From tokenizer_config.json ftune
// reads exactly what changes ids for that call (see tokenizer_config.h): special tokens missing
// from tokenizer.json, split_special_tokens, model_max_length, padding_side, truncation_side and
// pad_token.
//
// Invalid UTF-8 input is repaired, never rejected: each maximal invalid subsequence becomes
// U+FFFD (see utf8.h). Encoding is thread-safe: one Tokenizer may serve many threads.
//
// Not reproduced: offsets, overflowing tokens (stride), BPE dropout (ftune is deterministic), the
// UnicodeScripts pre-tokenizer (a load error), and the classes of characters assigned after the
// Unicode versions of Debian 12's libraries (PCRE2 regex classes: 14.0, ICU: 15.0; HF: 16.0) —
// see unicode_props.h and regex.h. tests/text/tokenizer_parity_test.cc holds the evidence.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ftune {
class ThreadPool;
}

namespace ftune::text {

// What the model receives for one input (HF Encoding; offsets are not computed).
struct Encoding {
  std::vector<uint32_t> ids;                 // input_ids
  std::vector<uint32_t> type_ids;            // token_type_ids (segment ids)
  std::vector<uint8_t> attention_mask;       // 1 for real tokens, 0 for padding
  std::vector<uint8_t> special_tokens_mask;  // 1 for tokens added by the post-processor and padding
  size_t size() const { return ids.size(); }
};

enum class Truncation {
  kNone,          // keep every token
  kLongestFirst,  // remove from the longer of the two sequences, one token at a time
  kOnlyFirst,     // remove from the first sequence only
  kOnlySecond,    // remove from the second (pair) sequence only
};
enum class Padding {
  kNone,
  kLongest,    // to the longest encoding of the batch (encode_batch), i.e. none for encode
  kMaxLength,  // to max_length
};
enum class Side { kRight, kLeft };

struct EncodeOptions {
  bool add_special_tokens = true;
  Truncation truncation = Truncation::kNone;
  // Total length, special tokens included, for truncation and for Padding::kMaxLength.
  // 0 with truncation or kMaxLength padding means the tokenizer's model_max_length.
  int64_t max_length = 0;
  Side truncation_side = Side::kRight;
  Padding padding = Padding::kNone;
  int64_t pad_to_multiple_of = 0;  // 0: none
  Side padding_side = Side::kRight;
  std::optional<uint32_t> pad_id;  // default: the tokenizer's pad token
  uint32_t pad_type_id = 0;
};

// One input of encode_batch: a text and an optional second text (sentence pairs).
struct TextPair {
  std::string text;
  std::optional<std::string> pair;
};

class Tokenizer {
 public:
  // Loads a tokenizer.json file. InputError names the file and the JSON path at fault.
  static Tokenizer from_file(const std::string& tokenizer_json);
  // Loads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json.
  static Tokenizer from_dir(const std::string& dir);
  // A file or a directory (what `ftune tokenize --tokenizer` accepts).
  static Tokenizer from_path(const std::string& path);
  // From JSON text (`config_json` may be empty); `name` labels errors.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {},
                             const std::string& name = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // HF `tokenizer(text, text_pair)`.
  Encoding encode(std::string_view text, std::optional<std::string_view> pair = std::nullopt) const;
  Encoding encode(std::string_view text, std::optional<std::string_view> pair,
                  const EncodeOptions& options) const;
  // Encodes every input, in parallel on `pool` (default: ftune::compute_pool()); results are in
  // input order and identical to encode() one by one, apart from Padding::kLongest, which pads to
  // the longest of the batch.
  std::vector<Encoding> encode_batch(const std::vector<TextPair>& inputs,
                                     const EncodeOptions& options,
                                     ThreadPool* pool = nullptr) const;

  // HF `tokenizer.decode(ids, skip_special_tokens)` as the tokenizers library does it (the decoder
  // of tokenizer.json; no clean_up_tokenization_spaces pass).
  std::string decode(const std::vector<uint32_t>& ids, bool skip_special_tokens = false) const;

  // Options equal to transformers' defaults for this tokenizer (sides from tokenizer_config.json).
  EncodeOptions default_options() const;
  // The truncation / padding stored in tokenizer.json (what tokenizers.Tokenizer.encode applies).
  EncodeOptions tokenizers_options() const;

  std::optional<uint32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(uint32_t id) const;
  // Model vocabulary plus added tokens not already in it (HF get_vocab_size(True)).
  size_t vocab_size() const;
  std::optional<uint32_t> pad_id() const;
  // tokenizer_config.json's model_max_length when it is a real limit (below 1e30), else nullopt.
  std::optional<int64_t> model_max_length() const;
  // Number of tokens the post-processor adds to a single input or to a pair.
  size_t num_special_tokens(bool pair) const;

  struct Impl;  // the loaded pipeline (src/text/tokenizer_impl.h; internal)

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ftune::text
