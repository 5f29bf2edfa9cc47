// Fixture paths and gzipped JSONL reading for the tokenizer tests (see tokenizer_fixtures.h).
#include "text/tokenizer_fixtures.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "test_util.h"

namespace ftune::test {

std::string tokenizer_fixtures_dir() {
  return fixtures_dir() + "/tokenizers";
}

std::optional<std::string> shared_tokenizers_dir() {
  std::string shared;
  if (const char* env = std::getenv("FTUNE_SHARED_DIR"); env && *env)
    shared = env;
  else
    shared = source_dir() + "/../shared";
  const std::string dir = shared + "/fixtures/tokenizers";
  if (!std::filesystem::is_directory(dir)) return std::nullopt;
  return dir;
}

std::vector<nlohmann::json> read_jsonl_gz(const std::string& path) {
  if (!std::filesystem::exists(path)) throw std::runtime_error(path + ": missing");
  const std::string cmd = "gzip -dc '" + path + "'";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("cannot run " + cmd);
  std::string data;
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) data.append(buf, n);
  if (pclose(p) != 0) throw std::runtime_error(cmd + " failed");
  std::vector<nlohmann::json> out;
  size_t start = 0;
  while (start < data.size()) {
    size_t end = data.find('\n', start);
    if (end == std::string::npos) end = data.size();
    if (end > start) out.push_back(nlohmann::json::parse(data.begin() + start, data.begin() + end));
    start = end + 1;
  }
  return out;
}

const std::vector<std::string>& fixture_corpus() {
  static const std::vector<std::string> texts = [] {
    std::vector<std::string> t;
    for (const auto& j : read_jsonl_gz(tokenizer_fixtures_dir() + "/corpus.jsonl.gz"))
      t.push_back(j.at("t"));
    return t;
  }();
  return texts;
}

}  // namespace ftune::test
