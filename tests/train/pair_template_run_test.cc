// data.pair_template end to end through the command line: a tiny Llama trained with LoRA on pairs
// formatted by a template (the second text first, so the tokenizer's own pairing gives other ids)
// tokenizes every split with it, saves it with each checkpoint, the adapter and the merged model
// (ftune.json), and `ftune predict` / `ftune eval` on the model directory format text exactly as
// training did; a malformed template fails with exit status 2 naming the key, and writes nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/json_file.h"
#include "run_cli.h"
#include "test_util.h"
#include "text/pair_template.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

// Four tokens of its own where the tokenizer's pairing ([CLS] a [SEP] b [SEP]) has three, so token
// counts tell the two apart.
const char* kTemplate = "[CLS]{text_pair} || {text}[SEP]";

class PairTemplateRun : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.path() + "/llama";
    write_random_model({{"model_type", "llama"},
                        {"architectures", {"LlamaForSequenceClassification"}},
                        {"vocab_size", 30522},
                        {"hidden_size", 32},
                        {"num_hidden_layers", 2},
                        {"num_attention_heads", 4},
                        {"num_key_value_heads", 2},
                        {"intermediate_size", 64},
                        {"max_position_embeddings", 64},
                        {"rope_theta", 10000.0},
                        {"initializer_range", 0.2},
                        {"pad_token_id", 0},
                        {"bos_token_id", 101},
                        {"eos_token_id", 102},
                        {"num_labels", 2}},
                       model_, 4);
    write_pair_task(tmp_.path() + "/train.jsonl", 32, 7);
    write_pair_task(tmp_.path() + "/val.jsonl", 16, 8);
  }
  // A training config whose data section ends with `data_line` (the template, as YAML).
  std::string config(const std::string& run, const std::string& data_line) {
    const std::string path = tmp_.path() + "/" + run + ".yaml";
    std::ofstream(path) << "model:\n  path: " << model_ << "\ndata:\n  train: " << tmp_.path()
                        << "/train.jsonl\n  validation: " << tmp_.path()
                        << "/val.jsonl\n  max_length: 24\n"
                        << data_line
                        << "training:\n  epochs: 1\n  batch_size: 8\n  learning_rate: 1.0e-3\n"
                        << "  threads: 2\n  memory_budget: 1GiB\n"
                        << "peft:\n  method: lora\n  r: 4\n  alpha: 8\n"
                        << "  target_modules: all-linear\noutput:\n  dir: " << tmp_.path() << "/"
                        << run << "\n  progress: plain\n";
    return path;
  }
  // The template's ids of every row of `file` (as the test computes them).
  std::vector<text::Encoding> template_ids(const std::string& file) {
    std::vector<text::TextPair> pairs;
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      pairs.push_back({j["text"], j["text_pair"].get<std::string>()});
    }
    const text::Tokenizer tok = text::Tokenizer::from_dir(model_);
    return text::PairTemplate::parse(kTemplate, "t").encode_batch(tok, pairs, 24);
  }
  static int64_t tokens(const std::vector<text::Encoding>& enc) {
    int64_t n = 0;
    for (const text::Encoding& e : enc) n += static_cast<int64_t>(e.size());
    return n;
  }
  std::vector<nlohmann::json> predict(const std::string& data, const std::string& extra = "") {
    const std::string out = tmp_.path() + "/pred.jsonl";
    const CliResult r = run_ftune("predict --model " + tmp_.path() + "/run/model --data " + data +
                                  " --output " + out + " --threads 2 " + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::vector<nlohmann::json> rows;
    std::ifstream in(out);
    for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
    return rows;
  }
  TempDir tmp_;
  std::string model_;
};

TEST_F(PairTemplateRun, TrainingSavesItAndPredictAndEvalFormatAsTrainingDid) {
  const std::string yaml_line = std::string("  pair_template: \"") + kTemplate + "\"\n";
  const CliResult r = run_ftune("train --config " + config("run", yaml_line));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string run = tmp_.path() + "/run";
  for (const std::string dir : {run + "/model", run + "/adapter"})
    EXPECT_EQ(io::read_json_file(dir + "/ftune.json"), nlohmann::json({{"pair_template", kTemplate}}))
        << dir;
  // Every split was tokenized with the template (the tokenizer's own pairing gives other counts).
  const nlohmann::json summary = io::read_json_file(run + "/summary.json");
  const std::vector<text::Encoding> train_ids = template_ids(tmp_.path() + "/train.jsonl");
  const std::vector<text::Encoding> val_ids = template_ids(tmp_.path() + "/val.jsonl");
  EXPECT_EQ(summary["data"]["train_file"]["tokens"], tokens(train_ids));
  EXPECT_EQ(summary["data"]["validation_file"]["tokens"], tokens(val_ids));

  // predict on text equals predict on the template's ids, bit for bit.
  const std::string ids_file = tmp_.path() + "/ids.jsonl";
  {
    std::ofstream out(ids_file);
    for (const text::Encoding& e : val_ids)
      out << nlohmann::json{{"input_ids", e.ids}}.dump() << "\n";
  }
  const std::vector<nlohmann::json> by_text = predict(tmp_.path() + "/val.jsonl");
  const std::vector<nlohmann::json> by_ids = predict(ids_file);
  ASSERT_EQ(by_text.size(), 16u);
  ASSERT_EQ(by_ids.size(), by_text.size());
  for (size_t i = 0; i < by_text.size(); ++i)
    EXPECT_EQ(by_text[i]["logits"], by_ids[i]["logits"]) << "row " << i;
  // --pair-template overrides the saved one (here: other ids, other logits).
  const std::vector<nlohmann::json> other =
      predict(tmp_.path() + "/val.jsonl", "--pair-template '[CLS]{text} | {text_pair}[SEP]'");
  ASSERT_EQ(other.size(), by_text.size());
  EXPECT_NE(other[0]["logits"], by_text[0]["logits"]);

  // eval reads the saved template too.
  const CliResult e = run_ftune("eval --model " + run + "/model --data " + tmp_.path() +
                                    "/val.jsonl --threads 2",
                                "", Streams::kStdout);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_EQ(nlohmann::json::parse(e.output)["data"]["tokens"], tokens(val_ids)) << e.output;
}

TEST_F(PairTemplateRun, MalformedTemplatesFailWithStatus2AndWriteNothing) {
  const std::pair<std::string, std::string> bad[] = {
      {"  pair_template: \"{text} {label}\"\n",
       "key 'data.pair_template': unknown placeholder '{label}'; expected {text} and {text_pair}"},
      {"  pair_template: \"<bos>{text_pair}\"\n", "key 'data.pair_template': the template has no {text}"},
      {"  pair_template: {text}\n", "key 'data.pair_template' must be a string with {text}"},
  };
  for (const auto& [line, message] : bad) {
    const CliResult r = run_ftune("train --config " + config("bad", line));
    EXPECT_EQ(r.exit_code, 2) << line << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("bad.yaml"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(tmp_.path() + "/bad")) << line;
  }
  const CliResult o = run_ftune("train --config " + config("bad", "") +
                                " 'data.pair_template=\"{text}{text}\"'");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("'{text}' appears twice"), std::string::npos) << o.output;
  EXPECT_FALSE(fs::exists(tmp_.path() + "/bad"));

  const std::string out = tmp_.path() + "/pred.jsonl";
  const CliResult p = run_ftune("predict --model " + model_ + " --data " + tmp_.path() +
                                "/val.jsonl --output " + out + " --pair-template '{txt}'");
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_NE(p.output.find("--pair-template: unknown placeholder '{txt}'"), std::string::npos)
      << p.output;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace ftune::test
