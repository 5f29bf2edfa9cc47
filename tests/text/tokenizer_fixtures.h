// Locating the tokenizer fixtures of tests/text: the committed ones (tests/fixtures/tokenizers),
// the shared Gemma-3 / Llama-2 / Llama-3 files ($FTUNE_SHARED_DIR or <repo>/../shared) and the
// gzipped JSONL goldens written by tools/make_tokenizer_fixtures.py.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ftune::test {

// tests/fixtures/tokenizers, or $FTUNE_TOKENIZER_FIXTURES when set.
std::string tokenizer_fixtures_dir();
// <shared>/fixtures/tokenizers, or nullopt when the shared directory is absent.
std::optional<std::string> shared_tokenizers_dir();
// The lines of a .jsonl.gz file, parsed (decompressed with the system's gzip).
std::vector<nlohmann::json> read_jsonl_gz(const std::string& path);
// The corpus texts of corpus.jsonl.gz.
const std::vector<std::string>& fixture_corpus();

}  // namespace ftune::test
