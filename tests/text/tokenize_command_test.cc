// `ftune tokenize` end to end: output equal to the library (and so to HF), pairs, --max-length,
// and bad input reported as FILE:LINE with exit code 2 and no output file left behind.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "text/tokenizer.h"
#include "text/tokenizer_fixtures.h"

namespace ftune::text {
namespace {

namespace fs = std::filesystem;

struct CommandResult {
  int code;
  std::string stderr_text;
};

CommandResult run_tokenize(const std::string& args, const test::TempDir& dir) {
  const std::string err = dir.path() + "/stderr.txt";
  const std::string cmd =
      test::ftune_binary() + " tokenize " + args + " 2> " + err + " > /dev/null";
  const int status = std::system(cmd.c_str());
  std::ifstream in(err);
  std::stringstream ss;
  ss << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str()};
}

void write(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

const std::string kMiniLm = test::tokenizer_fixtures_dir() + "/minilm";

TEST(TokenizeCommand, MatchesTheLibraryForTextsAndPairs) {
  test::TempDir dir;
  const auto& texts = test::fixture_corpus();
  std::string input;
  std::vector<std::pair<std::string, std::optional<std::string>>> rows;
  for (size_t i = 0; i < 300; ++i) {
    nlohmann::json j;
    j["text"] = texts[i];
    std::optional<std::string> pair;
    if (i % 2) j["text_pair"] = *(pair = texts[i + 7]);
    if (i % 5 == 0) j["text_pair"] = nullptr;  // null pair: single text
    if (i % 5 == 0) pair.reset();
    j["label"] = 1;  // other keys are ignored
    input += j.dump() + "\n";
    rows.emplace_back(texts[i], pair);
  }
  write(dir.path() + "/in.jsonl", input);
  for (const std::string extra : {"", " --max-length 24 --threads 3"}) {
    const CommandResult r =
        run_tokenize("--tokenizer " + kMiniLm + " --input " + dir.path() + "/in.jsonl --output " +
                         dir.path() + "/out.jsonl" + extra,
                     dir);
    ASSERT_EQ(r.code, 0) << r.stderr_text;
    const auto out = read_jsonl(dir.path() + "/out.jsonl");
    ASSERT_EQ(out.size(), rows.size());
    const Tokenizer tok = Tokenizer::from_path(kMiniLm);
    EncodeOptions o = tok.default_options();
    if (!extra.empty()) {
      o.truncation = Truncation::kLongestFirst;
      o.max_length = 24;
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      std::optional<std::string_view> pair;
      if (rows[i].second) pair = *rows[i].second;
      const Encoding e = tok.encode(rows[i].first, pair, o);
      EXPECT_EQ(out[i].at("input_ids").get<std::vector<uint32_t>>(), e.ids) << "line " << i + 1;
      EXPECT_EQ(out[i].at("token_type_ids").get<std::vector<uint32_t>>(), e.type_ids)
          << "line " << i + 1;
      EXPECT_EQ(out[i].size(), 2u);
    }
  }
}

TEST(TokenizeCommand, BadLinesAreReportedWithFileAndLineAndLeaveNoOutput) {
  test::TempDir dir;
  const std::string in = dir.path() + "/in.jsonl", out = dir.path() + "/out.jsonl";
  const std::string base = "--tokenizer " + kMiniLm + " --input " + in + " --output " + out;
  struct Case {
    std::string content, message;
  };
  const std::vector<Case> cases = {
      {"{\"text\": \"ok\"}\n{\"txt\": \"x\"}\n", "in.jsonl:2: missing key \"text\""},
      {"{\"text\": \"ok\"}\nnot json\n", "in.jsonl:2: invalid JSON"},
      {"{\"text\": 5}\n", "in.jsonl:1: key \"text\" must be a string"},
      {"[1, 2]\n", "in.jsonl:1: expected a JSON object"},
      {"{\"text\": \"a\", \"text_pair\": [1]}\n",
       "in.jsonl:1: key \"text_pair\" must be a string or null"},
      {"{\"text\": \"bad \xff byte\"}\n", "in.jsonl:1: invalid UTF-8 at byte"},
      {"{\"text\": \"a\"}\n\n{\"text\": \"b\"}\n", "in.jsonl:2: empty line"},
      {"{\"text\": \"\\ud800\"}\n", "in.jsonl:1: invalid JSON"},
  };
  for (const Case& c : cases) {
    write(in, c.content);
    const CommandResult r = run_tokenize(base, dir);
    EXPECT_EQ(r.code, 2) << c.content;
    EXPECT_NE(r.stderr_text.find(c.message), std::string::npos) << r.stderr_text;
    EXPECT_FALSE(fs::exists(out)) << c.content;
    size_t leftovers = 0;
    for (const auto& entry : fs::directory_iterator(dir.path()))
      leftovers += entry.path().filename().string().find("out.jsonl") != std::string::npos;
    EXPECT_EQ(leftovers, 0u) << "temporary output left behind";
  }
  const CommandResult missing =
      run_tokenize("--tokenizer " + dir.path() + "/nope --input " + in + " --output " + out, dir);
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.stderr_text.find("/nope"), std::string::npos);
}

TEST(TokenizeCommand, InvalidUtf8CanBeReplacedAndTrailingBlankLinesAreFine) {
  test::TempDir dir;
  const std::string in = dir.path() + "/in.jsonl", out = dir.path() + "/out.jsonl";
  write(in, "{\"text\": \"caf\xc3\xa9 \xff!\"}\r\n{\"text\": \"x\"}\n\n\n");
  const CommandResult r = run_tokenize(
      "--tokenizer " + kMiniLm + " --input " + in + " --output " + out + " --invalid-utf8 replace",
      dir);
  ASSERT_EQ(r.code, 0) << r.stderr_text;
  const auto lines = read_jsonl(out);
  ASSERT_EQ(lines.size(), 2u);
  const Tokenizer tok = Tokenizer::from_path(kMiniLm);
  EXPECT_EQ(lines[0].at("input_ids").get<std::vector<uint32_t>>(),
            tok.encode("caf\xc3\xa9 \xef\xbf\xbd!").ids);
}

}  // namespace
}  // namespace ftune::text
