// `ftune export --merge`: the merged HF model gives the adapted model's logits (DoRA and LoRA
// fixtures from tools/make_peft_fixtures.py), and misuse leaves nothing behind.
#include <gtest/gtest.h>

#include <filesystem>

#include "golden_fixture.h"
#include "models/bert/bert_checkpoint.h"
#include "models/hf_checkpoint.h"
#include "models/peft_adapter.h"
#include "run_cli.h"

namespace ftune::test {
namespace {

// Inference logits of BASE (+ the adapter in ADAPTER, when given) on the engine fixture batch.
std::vector<float> logits_of(const std::string& model_dir, const std::string& adapter,
                             const Batch& batch) {
  ClassifierOptions o;
  o.max_batch = batch.size;
  o.max_seq = batch.seq_len;
  o.training = false;
  if (!adapter.empty()) o.adapters = read_peft_adapter_config(adapter);
  SequenceClassifier model(load_model_config(model_dir), o);
  ArenaPlan plan;
  model.add_to_plan(plan);
  Arena arena(Device::cpu(), std::move(plan));
  model.bind(arena);
  load_model_weights(model, model_dir);
  if (!adapter.empty()) load_peft_adapter(model, adapter);
  model.set_batch(batch);
  return to_vector(model.forward(DropoutPlan{}));
}

class ExportMerge : public ::testing::TestWithParam<std::string> {};

TEST_P(ExportMerge, MergedModelGivesTheAdaptedLogits) {
  const std::string base_case = GetParam().starts_with("bert") ? "bert_pair" : "roberta_pair";
  const GoldenCase g = GoldenCase::load(base_case);
  const std::string adapter = fixtures_dir() + "/peft/" + GetParam() + "/adapter";
  TempDir tmp;
  const std::string out = tmp.path() + "/merged";
  const CliResult r = run_ftune(
      fmt::format("export --model {} --adapter {} --merge --output {}", g.model_dir, adapter, out));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto want = logits_of(g.model_dir, adapter, g.batch);
  const auto got = logits_of(out, "", g.batch);
  ASSERT_EQ(got.size(), want.size());
  double scale = 0, err = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    scale = std::max(scale, std::fabs(double(want[i])));
    err = std::max(err, std::fabs(double(got[i]) - want[i]));
  }
  EXPECT_LT(err / scale, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Adapters, ExportMerge,
                         ::testing::Values("bert_dora", "bert_rslora", "roberta_lora",
                                           "bert_lora_pooler", "bert_dora_dropout"));

TEST(ExportCommand, WithoutMergeOrWithABadAdapterFailsAndWritesNothing) {
  const GoldenCase g = GoldenCase::load("bert_pair");
  TempDir tmp;
  const std::string out = tmp.path() + "/merged";
  CliResult r = run_ftune(fmt::format("export --model {} --adapter {} --output {}", g.model_dir,
                                      fixtures_dir() + "/peft/bert_lora/adapter", out));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("only --merge"), std::string::npos) << r.output;
  // A RoBERTa adapter on a BERT base: its tensors name modules this model does not have.
  r = run_ftune(fmt::format("export --model {} --adapter {} --merge --output {}", g.model_dir,
                            fixtures_dir() + "/peft/roberta_lora/adapter", out));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("adapter_model.safetensors"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace ftune::test
