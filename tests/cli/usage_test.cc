// Usage errors of the command line: exit status 2 (not CLI11's 105 / 106 / 109), an unknown or
// missing verb named with the list of verbs, and values checked in words and the same way by
// every verb (batch sizes, thresholds) before any work; --help and --version still exit 0.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "run_cli.h"
#include "test_util.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

class Usage : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(data_) << "{\"input_ids\": [2, 5, 3], \"label\": \"LABEL_1\"}\n";
  }
  TempDir tmp_;
  // Three labels, token ids only (no tokenizer): enough for every check here.
  std::string model_ = fixtures_dir() + "/engine/bert_pair/model";
  std::string data_ = tmp_.path() + "/in.jsonl", out_ = tmp_.path() + "/out.jsonl";
};

TEST_F(Usage, UnknownOrMissingVerbIsNamedWithTheVerbs) {
  const CliResult typo = run_ftune("trian --config x.yaml");
  EXPECT_EQ(typo.exit_code, 2) << typo.output;
  EXPECT_NE(typo.output.find("unknown command 'ftune trian'; the commands are: "),
            std::string::npos)
      << typo.output;
  for (const char* verb : {"train", "eval", "predict", "plan", "hpo"})
    EXPECT_NE(typo.output.find(verb), std::string::npos) << verb;
  const CliResult none = run_ftune("");
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_NE(none.output.find("'ftune' needs a command: "), std::string::npos) << none.output;
  const CliResult hpo = run_ftune("hpo strat --config s.yaml");
  EXPECT_EQ(hpo.exit_code, 2) << hpo.output;
  EXPECT_NE(hpo.output.find("unknown command 'ftune hpo strat'; the commands are: run"),
            std::string::npos)
      << hpo.output;
  EXPECT_EQ(run_ftune("--help").exit_code, 0);
  EXPECT_EQ(run_ftune("--version").exit_code, 0);
  EXPECT_EQ(run_ftune("predict --help").exit_code, 0);
}

TEST_F(Usage, ParseErrorsExitWithStatusTwo) {
  const CliResult missing = run_ftune("train");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("--config is required"), std::string::npos) << missing.output;
  const CliResult extra = run_ftune("eval --model " + model_ + " --data " + data_ + " surplus");
  EXPECT_EQ(extra.exit_code, 2) << extra.output;
  const CliResult nodir =
      run_ftune("predict --model " + tmp_.path() + "/none --data " + data_ + " --output " + out_);
  EXPECT_EQ(nodir.exit_code, 2) << nodir.output;
}

TEST_F(Usage, NumbersAreCheckedInWords) {
  const std::string predict =
      "predict --model " + model_ + " --data " + data_ + " --output " + out_;
  const std::string eval = "eval --model " + model_ + " --data " + data_;
  for (const std::string& c : {predict, eval}) {
    for (const char* v : {"0", "many"}) {
      const CliResult r = run_ftune(c + " --batch-size " + v);
      EXPECT_EQ(r.exit_code, 2) << r.output;
      EXPECT_NE(
          r.output.find(std::string("--batch-size: must be a positive integer, got '") + v + "'"),
          std::string::npos)
          << r.output;
    }
    // Every value outside (0, 1) is refused the same way, -1 included (it used to mean "use the
    // stored threshold"), before the data is read.
    for (const char* t : {"-1", "0", "1.5", "half"}) {
      const CliResult r = run_ftune(c + " --threshold " + t);
      EXPECT_EQ(r.exit_code, 2) << t << "\n" << r.output;
      EXPECT_NE(r.output.find(std::string("--threshold: must be a probability strictly between "
                                          "0 and 1, got '") +
                              t + "'"),
                std::string::npos)
          << r.output;
    }
    const CliResult multi = run_ftune(c + " --threshold 0.5");
    EXPECT_EQ(multi.exit_code, 2) << multi.output;
    EXPECT_NE(
        multi.output.find("--threshold applies to binary models; " + model_ + " has 3 labels"),
        std::string::npos)
        << multi.output;
  }
  EXPECT_FALSE(fs::exists(out_));
  const CliResult ok = run_ftune(predict + " --batch-size 2");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

}  // namespace
}  // namespace ftune::test
