// Bad models and bad arguments are refused up front, through the command line, with exit status
// 2 and a message naming what is wrong: a missing model directory (with its key), a model whose
// vocabulary is smaller than its tokenizer's (both files, both sizes), a pooler of the wrong
// shape (never re-initialised), predict / eval lengths beyond the model's positions, an output
// directory that cannot be one, CUDA asked for where no GPU is, and invalid UTF-8 in predict's
// input (file:line).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/device.h"
#include "core/memory.h"
#include "io/safetensors.h"
#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

class ModelInputs : public ::testing::Test {
 protected:
  void SetUp() override {
    write_tiny_bert(model_);
    write_pair_task(tmp_.path() + "/train.jsonl", 32, 1);
    write_pair_task(data_, 8, 2);
  }
  // A 2-step run of the tiny model into <tmp>/run.
  std::string config() {
    const std::string path = tmp_.path() + "/config.yaml";
    std::ofstream(path) << "model:\n  path: " << model_ << "\ndata:\n  train: " << tmp_.path()
                        << "/train.jsonl\n  max_length: 16\n"
                        << "training:\n  max_steps: 2\n  batch_size: 8\n  threads: 1\n"
                        << "output:\n  dir: " << run_ << "\n  progress: plain\n";
    return path;
  }
  // The train, plan, eval and predict command lines for model directory `model`.
  std::vector<std::string> commands(const std::string& model) {
    return {"train --config " + config() + " model.path=" + model,
            "plan --config " + config() + " model.path=" + model,
            "eval --model " + model + " --data " + data_,
            "predict --model " + model + " --data " + data_ + " --output " + out_};
  }
  TempDir tmp_;
  std::string model_ = tmp_.path() + "/tiny", data_ = tmp_.path() + "/data.jsonl",
              run_ = tmp_.path() + "/run", out_ = tmp_.path() + "/out.jsonl";
};

TEST_F(ModelInputs, MissingModelDirectoryIsNamed) {
  const std::string nope = tmp_.path() + "/nope";
  for (const std::string& c : {commands(nope)[0], commands(nope)[1]}) {
    const CliResult r = run_ftune(c);
    EXPECT_EQ(r.exit_code, 2) << c << "\n" << r.output;
    EXPECT_NE(r.output.find("key 'model.path': the model directory '" + nope + "' does not exist"),
              std::string::npos)
        << r.output;
  }
  const CliResult eval = run_ftune(commands(nope)[2]);
  EXPECT_EQ(eval.exit_code, 2);
  EXPECT_NE(eval.output.find("model directory '" + nope + "' does not exist"), std::string::npos)
      << eval.output;
  const CliResult predict = run_ftune(commands(nope)[3]);
  EXPECT_EQ(predict.exit_code, 2);
  EXPECT_NE(predict.output.find(nope), std::string::npos) << predict.output;
  EXPECT_FALSE(fs::exists(run_));
}

TEST_F(ModelInputs, VocabularySmallerThanTheTokenizerIsRefusedUpFront) {
  const std::string small = tmp_.path() + "/small";
  write_tiny_bert(small, 2, 1000);
  const std::string message = small +
                              "/tokenizer.json has 30522 tokens, but the model's "
                              "vocabulary (" +
                              small + "/config.json vocab_size) has only 1000";
  for (const std::string& c : commands(small)) {
    const CliResult r = run_ftune(c);
    EXPECT_EQ(r.exit_code, 2) << c << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << c << "\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(run_));
  EXPECT_FALSE(fs::exists(out_));
}

TEST_F(ModelInputs, PoolerOfTheWrongShapeIsRefusedNotReinitialised) {
  const std::string bad = tmp_.path() + "/bad_pooler";
  fs::copy(model_, bad);
  {
    const auto file = io::SafetensorsFile::open(model_ + "/model.safetensors");
    std::vector<HostTensor> held;
    std::vector<io::SafetensorsTensor> tensors;
    for (const auto& e : file.entries()) {
      held.push_back(e.name == "bert.pooler.dense.weight" ? HostTensor(DType::F32, {16, 32})
                                                          : file.read(e.name));
      tensors.push_back({e.name, held.back().view(), std::nullopt});
    }
    io::write_safetensors(bad + "/model.safetensors", tensors);
  }
  const CliResult r = run_ftune(commands(bad)[0]);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("tensor 'bert.pooler.dense.weight' has shape (16, 32), but the model "
                          "expects (32, 32)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("newly initialised"), std::string::npos) << r.output;
}

TEST_F(ModelInputs, PredictAndEvalLengthsStayWithinThePositions) {
  // The tiny model has 64 positions.
  const std::string beyond = "--max-length 65 is more than the model holds: " + model_ +
                             "/config.json has max_position_embeddings 64, room for 64 tokens";
  for (const std::string& c : {commands(model_)[2], commands(model_)[3]}) {
    const CliResult over = run_ftune(c + " --max-length 65");
    EXPECT_EQ(over.exit_code, 2) << over.output;
    EXPECT_NE(over.output.find(beyond), std::string::npos) << over.output;
    for (const char* bad : {"0", "-3"}) {
      const CliResult r = run_ftune(c + " --max-length " + bad);
      EXPECT_EQ(r.exit_code, 2) << r.output;
      EXPECT_NE(
          r.output.find(std::string("--max-length: must be a positive integer, got '") + bad + "'"),
          std::string::npos)
          << r.output;
    }
    const CliResult ok = run_ftune(c + " --max-length 64");
    EXPECT_EQ(ok.exit_code, 0) << ok.output;
  }
}

TEST_F(ModelInputs, OutputDirectoryThatCannotBeOneIsNamed) {
  std::ofstream(run_) << "a file";
  const CliResult file = run_ftune("train --config " + config());
  EXPECT_EQ(file.exit_code, 2) << file.output;
  EXPECT_NE(file.output.find("output.dir " + run_ + " exists and is not a directory"),
            std::string::npos)
      << file.output;
  const CliResult under = run_ftune("train --config " + config() + " output.dir=" + run_ + "/x");
  EXPECT_EQ(under.exit_code, 2) << under.output;
  EXPECT_NE(under.output.find("cannot create output.dir " + run_ + "/x: Not a directory"),
            std::string::npos)
      << under.output;
  EXPECT_EQ(under.output.find("unexpected error"), std::string::npos) << under.output;
  if (geteuid() != 0) {  // root writes into read-only directories
    const std::string ro = tmp_.path() + "/ro";
    fs::create_directories(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    const CliResult r = run_ftune("train --config " + config() + " output.dir=" + ro + "/run");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("cannot create output.dir " + ro + "/run: Permission denied"),
              std::string::npos)
        << r.output;
  }
}

TEST_F(ModelInputs, PredictNamesCudaWithoutAGpuAndInvalidUtf8) {
  if (cuda_device_count() == 0) {
    const CliResult r = run_ftune(commands(model_)[3] + " --device cuda");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("--device is 'cuda', but"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("cudaError"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out_));
  }
  std::ofstream(data_, std::ios::app) << "{\"text\": \"caf\xe9\", \"text_pair\": \"good\"}\n";
  const CliResult utf8 = run_ftune(commands(model_)[3]);
  EXPECT_EQ(utf8.exit_code, 2) << utf8.output;
  EXPECT_NE(utf8.output.find(data_ + ":9: invalid UTF-8 at column 14"), std::string::npos)
      << utf8.output;
  EXPECT_FALSE(fs::exists(out_));
}

}  // namespace
}  // namespace ftune::test
