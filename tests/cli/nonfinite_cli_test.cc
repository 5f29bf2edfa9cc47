// A NaN model is never reported as a success: `predict` and `eval` refuse non-finite weights at
// load (naming the tensor and the file) and non-finite logits (naming the row), with exit code 2
// and no output written; they used to write {"label": "LABEL_0", "logits": [null, ...]} and an
// accuracy. `eval` reads rows of token ids without a tokenizer.json, as `predict` does.
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

// A copy of the bert_pair fixture model at `to` with every element of tensor `name` (element 3
// only when `one`) set to `value`.
void copy_model_with(const std::string& to, const std::string& name, float value, bool one) {
  const std::string from = fixtures_dir() + "/engine/bert_pair/model";
  fs::copy(from, to, fs::copy_options::recursive);
  const io::SafetensorsFile f = io::SafetensorsFile::open(from + "/model.safetensors");
  std::vector<HostTensor> held;
  held.reserve(f.entries().size());
  std::vector<io::SafetensorsTensor> out;
  for (const io::SafetensorsEntry& e : f.entries()) {
    held.push_back(f.read(e.name));
    if (e.name == name) {
      float* p = held.back().data<float>();
      if (one)
        p[3] = value;
      else
        for (int64_t i = 0; i < held.back().numel(); ++i) p[i] = value;
    }
    out.push_back({e.name, held.back().view(), {}});
  }
  io::write_safetensors(to + "/model.safetensors", out);
}

class NonFiniteCli : public ::testing::Test {
 protected:
  void SetUp() override {
    rows_ = tmp_.path() + "/rows.jsonl";
    std::ofstream(rows_) << "{\"input_ids\": [2, 5, 7, 3], \"label\": \"LABEL_1\"}\n"
                         << "\n"
                         << "{\"input_ids\": [2, 9, 3], \"token_type_ids\": [0, 0, 0], "
                            "\"label\": 2}\n";
  }
  std::string out() const { return tmp_.path() + "/out.json"; }
  TempDir tmp_;
  std::string rows_;
};

TEST_F(NonFiniteCli, NanWeightsAreRefusedAtLoadNamingTheTensor) {
  const std::string model = tmp_.path() + "/nan";
  copy_model_with(model, "bert.encoder.layer.0.attention.self.query.weight", std::nanf(""), true);
  for (const char* verb : {"predict", "eval"}) {
    const CliResult r = run_ftune(std::string(verb) + " --model " + model + " --data " + rows_ +
                                  " --output " + out());
    EXPECT_EQ(r.exit_code, 2) << verb << "\n" << r.output;
    EXPECT_NE(r.output.find("bert.encoder.layer.0.attention.self.query.weight"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find(model + "/model.safetensors"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("NaN"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out())) << verb;
  }
}

// Finite weights whose logits overflow: an error naming the input row (file:line), not a label.
TEST_F(NonFiniteCli, NonFiniteLogitsAreAnErrorNamingTheRow) {
  const std::string model = tmp_.path() + "/huge";
  copy_model_with(model, "classifier.weight", 3e38f, false);
  for (const char* verb : {"predict", "eval"}) {
    const CliResult r = run_ftune(std::string(verb) + " --model " + model + " --data " + rows_ +
                                  " --output " + out());
    EXPECT_EQ(r.exit_code, 2) << verb << "\n" << r.output;
    EXPECT_NE(r.output.find("rows.jsonl:1: the logits of this row are not finite"),
              std::string::npos)
        << r.output;
    EXPECT_FALSE(fs::exists(out())) << verb;
  }
}

// The fixture model has no tokenizer.json: `predict` reads token ids, and now `eval` does too
// (labels by name or id, the blank line skipped).
TEST_F(NonFiniteCli, EvalReadsTokenIdsWithoutATokenizer) {
  const std::string model = fixtures_dir() + "/engine/bert_pair/model";
  ASSERT_FALSE(fs::exists(model + "/tokenizer.json"));
  const CliResult r =
      run_ftune("eval --model " + model + " --data " + rows_ + " --output " + out());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(file_bytes(out()));
  EXPECT_EQ(j["data"]["examples"], 2);
  EXPECT_EQ(j["data"]["class_counts"], nlohmann::json({0, 1, 1}));
  EXPECT_TRUE(j["loss"].is_number()) << j.dump();
  // A row without input_ids among them is named.
  std::ofstream(rows_, std::ios::app) << "{\"text\": \"a\", \"label\": 0}\n";
  const CliResult bad = run_ftune("eval --model " + model + " --data " + rows_);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("rows.jsonl:4"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace ftune::test
