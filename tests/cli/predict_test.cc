// `ftune predict` through the command line: logits equal to transformers' on the golden batch of
// each family (BERT, DeBERTa-v3, DeBERTa-v2),
// one output line per input line in order, and bad input -> exit code 2, a message naming the
// file and line, and no output file.
#include <gtest/gtest.h>

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

class PredictCli : public ::testing::Test {
 protected:
  void SetUp() override { use_case("bert_pair"); }
  // The golden case (tools/make_engine_fixtures.py layout) whose model and batch the test reads.
  void use_case(const std::string& name) {
    case_ = fixtures_dir() + "/engine/" + name;
    model_ = case_ + "/model";
    const auto inputs = io::SafetensorsFile::open(case_ + "/inputs.safetensors");
    const HostTensor ids = inputs.read("input_ids"), types = inputs.read("token_type_ids"),
                     mask = inputs.read("attention_mask");
    const int64_t B = ids.shape()[0], T = ids.shape()[1];
    std::ofstream out(data());
    for (int64_t b = 0; b < B; ++b) {
      nlohmann::json row;
      for (int64_t t = 0; t < T; ++t) {
        if (!mask.data<int64_t>()[b * T + t]) break;
        row["input_ids"].push_back(ids.data<int64_t>()[b * T + t]);
        row["token_type_ids"].push_back(types.data<int64_t>()[b * T + t]);
      }
      out << row.dump() << "\n";
      if (b == 1) out << "\n";  // blank lines are skipped
    }
  }
  std::string data() const { return tmp_.path() + "/in.jsonl"; }
  std::string output() const { return tmp_.path() + "/out.jsonl"; }
  std::string case_, model_;
  TempDir tmp_;
};

// Every family's golden case: BERT, and DeBERTa-v3 / v2 (tools/make_deberta_fixtures.py).
class PredictGolden : public PredictCli, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override { use_case(GetParam()); }
};

TEST_P(PredictGolden, LogitsMatchTransformersInInputOrder) {
  const CliResult r = run_ftune("predict --model " + model_ + " --data " + data() + " --output " +
                                output() + " --batch-size 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto lines = read_lines(output());
  ASSERT_EQ(lines.size(), 4u);
  const HostTensor expected =
      io::SafetensorsFile::open(case_ + "/expected.safetensors").read("logits");
  const size_t K = static_cast<size_t>(expected.shape()[1]);
  for (size_t b = 0; b < lines.size(); ++b) {
    const auto j = nlohmann::json::parse(lines[b]);
    const auto logits = j["logits"].get<std::vector<float>>();
    ASSERT_EQ(logits.size(), K);
    size_t best = 0;
    for (size_t k = 0; k < K; ++k) {
      EXPECT_NEAR(logits[k], expected.data<float>()[b * K + k], 1e-5) << "row " << b;
      if (logits[k] > logits[best]) best = k;
    }
    EXPECT_EQ(j["label"], "LABEL_" + std::to_string(best));
  }
}

INSTANTIATE_TEST_SUITE_P(Families, PredictGolden,
                         ::testing::Values("bert_pair", "deberta_v3_pair", "deberta_v2_pair"));

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
