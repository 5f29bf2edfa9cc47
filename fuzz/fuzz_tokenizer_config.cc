// Fuzzes tokenizer_config.json (text/tokenizer_config.h): byte 0 picks one of the tiny seed
// tokenizers (fuzz/seeds/tokenizer_json), the rest is the tokenizer_config.json applied to it, as
// Tokenizer::from_dir does. The pair loads or raises InputError; a tokenizer that loads encodes
// texts (with its configured padding and truncation sides, max length and pad token), pads to a
// length, and decodes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_files.h"
#include "text/tokenizer.h"

namespace {

using namespace ftune;

std::vector<std::string>& tokenizer_texts() {
  static std::vector<std::string> t;
  return t;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_tokenizer_config: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = std::string(FTUNE_SOURCE_DIR) + "/fuzz/seeds/tokenizer_json/";
  for (const char* name :
       {"wordpiece_bert", "bpe_suffix", "unigram_precompiled", "wordlevel", "bytelevel_llama3"}) {
    std::ifstream in(dir + name + ".json", std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    check(!ss.str().empty(), "missing seed tokenizer");
    tokenizer_texts().push_back(ss.str());
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string& tok_json = tokenizer_texts()[data[0] % tokenizer_texts().size()];
  const std::string_view config(reinterpret_cast<const char*>(data + 1), size - 1);
  fuzz::expect_input_error([&] {
    // An empty config_json means "no file"; a present but empty file is invalid JSON.
    const text::Tokenizer tok = text::Tokenizer::from_json(
        tok_json, config.empty() ? std::string_view(" ") : config, "model/tokenizer.json");
    text::EncodeOptions o = tok.default_options();
    for (std::string_view s :
         {std::string_view("Hello, world! [CLS] <s> It's 2024."),
          std::string_view("\xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80 [MASK]"), config.substr(0, 48)}) {
      const text::Encoding plain = tok.encode(s, std::string_view("pair [SEP] text"));
      for (uint32_t id : plain.ids) check(tok.id_to_token(id).has_value(), "every id has a token");
      (void)tok.decode(plain.ids, true);
      o.truncation = text::Truncation::kLongestFirst;
      o.padding = text::Padding::kMaxLength;
      o.max_length = 16;
      const text::Encoding cut = tok.encode(s, std::string_view("pair"), o);
      check(cut.ids.size() == cut.attention_mask.size(), "field sizes");
      (void)tok.decode(cut.ids, false);
    }
  });
  return 0;
}
