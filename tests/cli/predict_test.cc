// `ftune predict` through the command line: logits equal to transformers' on the golden batch,
// one output line per input line in order, and bad input -> exit code 2, a message naming the
// file and line, and no output file.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "run_cli.h"
#include "test_util.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// The golden batch of fixture case `name` as JSONL rows of token ids (padding dropped), with a
// blank line after row 1 (skipped). Token types only for families that read them.
void write_golden_rows(const std::string& name, const std::string& path, bool types_too) {
  const auto inputs =
      io::SafetensorsFile::open(fixtures_dir() + "/engine/" + name + "/inputs.safetensors");
  const HostTensor ids = inputs.read("input_ids"), types = inputs.read("token_type_ids"),
                   mask = inputs.read("attention_mask");
  const int64_t B = ids.shape()[0], T = ids.shape()[1];
  std::ofstream out(path);
  for (int64_t b = 0; b < B; ++b) {
    nlohmann::json row;
    for (int64_t t = 0; t < T; ++t) {
      if (!mask.data<int64_t>()[b * T + t]) break;
      row["input_ids"].push_back(ids.data<int64_t>()[b * T + t]);
      if (types_too) row["token_type_ids"].push_back(types.data<int64_t>()[b * T + t]);
    }
    out << row.dump() << "\n";
    if (b == 1) out << "\n";  // blank lines are skipped
  }
}

// `ftune predict`'s logits on case `name`'s model and batch against transformers' (K labels, from
// the expected logits), within tol x max(1, |expected|).
void expect_golden_logits(const std::string& name, const std::string& output, double tol) {
  const auto lines = read_lines(output);
  ASSERT_EQ(lines.size(), 4u);
  const HostTensor expected =
      io::SafetensorsFile::open(fixtures_dir() + "/engine/" + name + "/expected.safetensors")
          .read("logits");
  const size_t K = static_cast<size_t>(expected.shape()[1]);
  for (size_t b = 0; b < lines.size(); ++b) {
    const auto j = nlohmann::json::parse(lines[b]);
    const auto logits = j["logits"].get<std::vector<float>>();
    ASSERT_EQ(logits.size(), K);
    size_t best = 0;
    for (size_t k = 0; k < K; ++k) {
      EXPECT_NEAR(logits[k], expected.data<float>()[b * K + k],
                  tol * std::max(1.0f, std::fabs(expected.data<float>()[b * K + k])))
          << name << " row " << b;
      if (logits[k] > logits[best]) best = k;
    }
    EXPECT_EQ(j["label"], "LABEL_" + std::to_string(best));
  }
}

class PredictCli : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = fixtures_dir() + "/engine/bert_pair/model";
    write_golden_rows("bert_pair", data(), true);
  }
  std::string data() const { return tmp_.path() + "/in.jsonl"; }
  std::string output() const { return tmp_.path() + "/out.jsonl"; }
  std::string model_;
  TempDir tmp_;
};

TEST_F(PredictCli, LogitsMatchTransformersInInputOrder) {
  const CliResult r = run_ftune("predict --model " + model_ + " --data " + data() + " --output " +
                                output() + " --batch-size 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_golden_logits("bert_pair", output(), 1e-5);
}

// Decoder classifiers (Llama, Qwen2, Mistral, Qwen3): rows padded by predict on the right with the pad id,
// pooled at the last non-pad token as transformers does. ModernBERT (no token types either) runs
// the same test.
class PredictDecoderCli : public ::testing::TestWithParam<std::string> {};

TEST_P(PredictDecoderCli, LogitsMatchTransformers) {
  TempDir tmp;
  write_golden_rows(GetParam(), tmp.path() + "/in.jsonl", false);
  const CliResult r = run_ftune("predict --model " + fixtures_dir() + "/engine/" + GetParam() +
                                "/model --data " + tmp.path() + "/in.jsonl --output " +
                                tmp.path() + "/out.jsonl --batch-size 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_golden_logits(GetParam(), tmp.path() + "/out.jsonl", 1e-4);
}

// DeBERTa-v3 (no token types) and DeBERTa-v2 (two) cross-encoders
// (tools/make_deberta_fixtures.py).
class PredictDebertaCli : public ::testing::TestWithParam<std::string> {};

TEST_P(PredictDebertaCli, LogitsMatchTransformers) {
  TempDir tmp;
  write_golden_rows(GetParam(), tmp.path() + "/in.jsonl", true);
  const CliResult r = run_ftune("predict --model " + fixtures_dir() + "/engine/" + GetParam() +
                                "/model --data " + tmp.path() + "/in.jsonl --output " +
                                tmp.path() + "/out.jsonl --batch-size 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_golden_logits(GetParam(), tmp.path() + "/out.jsonl", 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Families, PredictDebertaCli,
                         ::testing::Values("deberta_v3_pair", "deberta_v2_pair"));

INSTANTIATE_TEST_SUITE_P(Families, PredictDecoderCli,
                         ::testing::Values("llama_pair", "qwen2_pair", "mistral_pair",
                                           "qwen3_pair", "gemma_pair", "gemma2_pair", "gemma3_pair",
                                           "gemma3_mm_pair"));

INSTANTIATE_TEST_SUITE_P(ModernBert, PredictDecoderCli,
                         ::testing::Values("modernbert_cls", "modernbert_mean"));

TEST_F(PredictCli, BadInputNamesFileAndLineAndWritesNothing) {
  struct Case {
    std::string line, message;
  } cases[] = {
      {"{\"input_ids\": [2, 5, 3]", "invalid JSON"},
      {"{\"input_ids\": [2, 500, 3]}", "outside the vocabulary"},
      {"{\"input_ids\": [2, -1]}", "non-negative integers"},
      {"{\"ids\": [2, 3]}", "expected 'input_ids'"},
      {"[1, 2]", "expected a JSON object"},
      {"{\"input_ids\": [2, 3], \"token_type_ids\": [0]}", "token_type_ids"},
      {"{\"text\": \"no tokenizer here\"}", "tokenizer.json"},
  };
  for (const Case& c : cases) {
    const std::string bad = tmp_.path() + "/bad.jsonl";
    std::ofstream(bad) << "{\"input_ids\": [2, 5, 3]}\n" << c.line << "\n";
    const CliResult r =
        run_ftune("predict --model " + model_ + " --data " + bad + " --output " + output());
    EXPECT_EQ(r.exit_code, 2) << c.line << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.line << "\n" << r.output;
    if (c.message != "tokenizer.json")
      EXPECT_NE(r.output.find("bad.jsonl:2"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(output())) << c.line;
  }
  const CliResult missing = run_ftune("predict --model " + model_ + " --data " + tmp_.path() +
                                      "/none.jsonl --output " + output());
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("none.jsonl"), std::string::npos);
}

}  // namespace
}  // namespace ftune::test
