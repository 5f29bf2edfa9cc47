// Saving and re-loading HF model directories, and the errors bad checkpoints produce: each must
// name the file, the tensor or key, and what was expected — and never crash.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <vector>

#include "golden_fixture.h"
#include "io/json_file.h"
#include "models/bert/bert_checkpoint.h"
#include "models/hf_checkpoint.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

struct Model {
  std::unique_ptr<SequenceClassifier> model;
  Arena arena;
  LoadReport report;
};

Model load(const std::string& dir, const Batch& batch, const LoadOptions& lo = {}) {
  Model m;
  m.model = std::make_unique<SequenceClassifier>(
      load_model_config(dir, lo), ClassifierOptions{batch.size, batch.seq_len, false});
  ArenaPlan plan;
  m.model->add_to_plan(plan);
  m.arena = Arena(Device::cpu(), std::move(plan));
  m.model->bind(m.arena);
  m.report = load_model_weights(*m.model, dir, lo);
  return m;
}

std::string copy_model(const std::string& from, const TempDir& tmp) {
  const std::string to = tmp.path() + "/model";
  fs::copy(from, to, fs::copy_options::recursive);
  return to;
}

void expect_error(const std::function<void()>& fn, std::vector<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error raised";
  } catch (const InputError& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(HfCheckpoint, SaveThenLoadGivesIdenticalLogitsAndHfNames) {
  const GoldenCase c = GoldenCase::load("roberta_pair");
  Model a = load(c.model_dir, c.batch);
  TempDir tmp;
  save_model(*a.model, tmp.path() + "/saved");
  Model b = load(tmp.path() + "/saved", c.batch);
  EXPECT_TRUE(b.report.initialised.empty());
  EXPECT_TRUE(b.report.unexpected.empty());
  a.model->set_batch(c.batch);
  b.model->set_batch(c.batch);
  EXPECT_EQ(to_vector(a.model->forward(DropoutPlan{})), to_vector(b.model->forward(DropoutPlan{})));
  // Same tensor names and shapes as the checkpoint transformers wrote, and the "pt" format tag.
  const io::SafetensorsFile ours =
      io::SafetensorsFile::open(tmp.path() + "/saved/model.safetensors");
  const io::SafetensorsFile theirs = io::SafetensorsFile::open(c.model_dir + "/model.safetensors");
  ASSERT_EQ(ours.entries().size(), theirs.entries().size());
  for (size_t i = 0; i < ours.entries().size(); ++i) {
    EXPECT_EQ(ours.entries()[i].name, theirs.entries()[i].name);
    EXPECT_EQ(ours.entries()[i].shape, theirs.entries()[i].shape);
  }
  EXPECT_EQ(ours.metadata().at("format"), "pt");
  const nlohmann::json config = io::read_json_file(tmp.path() + "/saved/config.json");
  EXPECT_EQ(config["architectures"][0], "RobertaForSequenceClassification");
  EXPECT_EQ(config["id2label"].size(), 2u);
  EXPECT_EQ(config["pad_token_id"], 1);
}

TEST(HfCheckpoint, LabelOverrideReplacesAMismatchedHeadOnlyWhenAllowed) {
  const GoldenCase c = GoldenCase::load("bert_pair");  // 3 labels
  LoadOptions lo;
  lo.labels = std::vector<std::string>{"entailment", "contradiction"};
  expect_error([&] { load(c.model_dir, c.batch, lo); },
               {"classifier.weight", "(3, 32)", "(2, 32)", "2 labels"});
  lo.reinit_mismatched_head = true;
  Model m = load(c.model_dir, c.batch, lo);
  EXPECT_EQ(m.report.initialised,
            (std::vector<std::string>{"classifier.weight", "classifier.bias"}));
  EXPECT_EQ(m.model->config().id2label[1], "contradiction");
}

TEST(HfCheckpoint, OneLabelHeadsGiveOneScorePerRow) {
  // Rerankers (BGE, ms-marco cross-encoders) have num_labels = 1: one relevance score per pair.
  const GoldenCase c = GoldenCase::load("xlmr_pair");
  LoadOptions lo;
  lo.num_labels = 1;
  lo.reinit_mismatched_head = true;
  Model m = load(c.model_dir, c.batch, lo);
  Batch unlabelled = c.batch;
  unlabelled.labels.clear();
  m.model->set_batch(unlabelled);
  const TensorView logits = m.model->forward(DropoutPlan{});
  EXPECT_EQ(logits.shape, (Shape{c.batch.size, 1}));
  for (float v : to_vector(logits)) EXPECT_TRUE(std::isfinite(v));
  TempDir tmp;
  save_model(*m.model, tmp.path() + "/reranker");
  Model back = load(tmp.path() + "/reranker", c.batch);
  EXPECT_EQ(back.model->config().num_labels(), 1);
}

TEST(HfCheckpoint, BadConfigsAreInputErrorsNamingTheKey) {
  const GoldenCase c = GoldenCase::load("bert_pair");
  TempDir tmp;
  const std::string dir = copy_model(c.model_dir, tmp);
  nlohmann::json config = io::read_json_file(dir + "/config.json");
  auto write = [&](const nlohmann::json& j) { io::write_json_atomic(dir + "/config.json", j); };

  nlohmann::json j = config;
  j["model_type"] = "gpt2";
  write(j);
  expect_error([&] { load_model_config(dir); }, {"config.json", "model_type 'gpt2'"});
  j = config;
  j["hidden_size"] = "32";
  write(j);
  expect_error([&] { load_model_config(dir); }, {"config.json", "hidden_size", "integer"});
  j = config;
  j["num_attention_heads"] = 5;
  write(j);
  expect_error([&] { load_model_config(dir); }, {"not a multiple of num_attention_heads 5"});
  j = config;
  j["hidden_act"] = "swish";
  write(j);
  expect_error([&] { load_model_config(dir); }, {"hidden_act", "swish"});
  std::ofstream(dir + "/config.json") << "{\"model_type\": \"bert\",\n \"vocab_size\": 97,,}";
  expect_error([&] { load_model_config(dir); }, {"config.json:2"});
  expect_error([&] { load_model_config(tmp.path() + "/nowhere"); }, {"nowhere", "does not exist"});
}

TEST(HfCheckpoint, CorruptOrMismatchedWeightsAreInputErrors) {
  const GoldenCase c = GoldenCase::load("bert_pair");
  TempDir tmp;
  const std::string dir = copy_model(c.model_dir, tmp);
  const std::string weights = dir + "/model.safetensors";
  const auto size = fs::file_size(weights);

  fs::resize_file(weights, size / 2);  // truncated
  expect_error([&] { load(dir, c.batch); }, {"model.safetensors"});

  fs::remove(weights);
  expect_error([&] { load(dir, c.batch); }, {dir});

  // A checkpoint whose hidden size differs from its config (shape mismatch).
  const GoldenCase r = GoldenCase::load("roberta_pair");
  fs::copy_file(r.model_dir + "/model.safetensors", weights);
  nlohmann::json config = io::read_json_file(dir + "/config.json");
  config["model_type"] = "bert";
  config["intermediate_size"] = 40;
  io::write_json_atomic(dir + "/config.json", config);
  expect_error([&] { load(dir, c.batch); }, {"model.safetensors"});

  // Encoder weights missing altogether: a clear count and examples, not a random encoder.
  fs::remove(weights);
  io::write_safetensors(weights, {});
  expect_error([&] { load(dir, c.batch); }, {"encoder weights", "missing", "word_embeddings"});

  // A float tensor stored with an integer dtype.
  std::vector<io::SafetensorsTensor> tensors;
  const io::SafetensorsFile good = io::SafetensorsFile::open(c.model_dir + "/model.safetensors");
  std::vector<HostTensor> keep;
  for (const io::SafetensorsEntry& e : good.entries()) {
    keep.push_back(e.name == "bert.embeddings.LayerNorm.weight"
                       ? HostTensor(DType::I32, Shape(e.shape.begin(), e.shape.end()))
                       : good.read(e.name));
    tensors.push_back({e.name, keep.back().view(), {}});
  }
  io::write_json_atomic(dir + "/config.json", io::read_json_file(c.model_dir + "/config.json"));
  io::write_safetensors(weights, tensors);
  expect_error([&] { load(dir, c.batch); }, {"bert.embeddings.LayerNorm.weight", "I32", "float"});
}

TEST(HfCheckpoint, BatchesOutsideTheModelAreInputErrors) {
  const GoldenCase c = GoldenCase::load("bert_pair");
  Model m = load(c.model_dir, c.batch);
  Batch b = c.batch;
  b.input_ids[5] = 97;
  expect_error([&] { m.model->set_batch(b); }, {"row 0", "token id 97", "vocabulary of 97"});
  b = c.batch;
  b.token_type_ids[3] = 2;
  expect_error([&] { m.model->set_batch(b); }, {"token type 2"});
  b = c.batch;
  b.labels[1] = 3;
  expect_error([&] { m.model->set_batch(b); }, {"row 1", "label 3"});
  b = c.batch;
  b.size = 5;
  expect_error([&] { m.model->set_batch(b); }, {"exceeds the planned"});
}

// A word for sh -c, single-quoted.
std::string shell_quoted(const std::string& word) {
  std::string quoted = "'";
  for (char ch : word) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return quoted + "'";
}

// The Python of the transformers oracle: $FTUNE_PYTHON where set (as bench/*.sh read it; a
// development machine points it at its venv of tools/requirements-dev.txt), else python3 on PATH,
// if it has torch and transformers installed. The modules are looked up,
// not imported (importing torch takes seconds). Empty, with what each candidate lacked in `why`,
// where none has them (CI installs no torch).
std::string oracle_python(std::string& why) {
  std::vector<std::string> candidates{"python3"};
  if (const char* env = std::getenv("FTUNE_PYTHON"); env && *env) candidates = {env};
  for (const std::string& python : candidates) {
    const int rc = std::system((shell_quoted(python) +
                                " -c 'import importlib.util as u, sys; sys.exit(0 if u.find_spec(\"torch\")"
                                " and u.find_spec(\"transformers\") else 3)' >/dev/null 2>&1")
                                   .c_str());
    if (rc == 0) return python;
    why += (why.empty() ? "" : "; ") + python +
           (WIFEXITED(rc) && WEXITSTATUS(rc) == 3 ? ": no torch + transformers" : ": not found");
  }
  return "";
}

// transformers itself loads what ftune saved and gives the same logits (one Python process for the
// three models). Needs Python with torch and transformers (oracle_python); skipped, visibly, saying
// what it tried, where they are not installed.
TEST(HfCheckpoint, TransformersLoadsWhatFtuneSaved) {
  std::string why;
  const std::string python = oracle_python(why);
  if (python.empty())
    GTEST_SKIP() << "no Python with torch + transformers (" << why
                 << "): install tools/requirements-dev.txt or set FTUNE_PYTHON";
  TempDir tmp;
  std::string cmd = shell_quoted(python) + " " + source_dir() + "/tools/check_hf_load.py";
  for (const std::string name : {"bert_pair", "roberta_pair", "xlmr_pair"}) {
    const GoldenCase c = GoldenCase::load(name);
    Model m = load(c.model_dir, c.batch);
    m.model->set_batch(c.batch);
    const TensorView logits = m.model->forward(DropoutPlan{});
    const std::string saved = tmp.path() + "/" + name, expected = saved + "_logits.safetensors";
    save_model(*m.model, saved);
    io::write_safetensors(expected, {{"logits", logits, {}}});
    cmd += " " + saved + " " + c.dir + "/inputs.safetensors " + expected;
  }
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace ftune::test
