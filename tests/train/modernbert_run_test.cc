// The ModernBERT family end to end: a tiny ModernBERT classifier (local layers whose window is
// shorter than the rows, dropout on) trains through run_training on packed micro-batches (the
// family's default), learns, saves an HF directory under its own names, and predicts from it with
// the same logits whatever the batch; packed and padded runs follow the same trajectory with every
// dropout on; LoRA trains it too, in bf16 and f16 with checkpointing following the fp32 run.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "models/hf_checkpoint.h"
#include "models/predictor.h"
#include "test_util.h"
#include "tiny_model.h"
#include "train/trainer.h"
#include "precision_run.h"
#include "trajectory_compare.h"

namespace ftune::test {
namespace {

nlohmann::json tiny_modernbert_config() {
  return {{"model_type", "modernbert"},      {"vocab_size", 30522},
          {"hidden_size", 32},               {"num_hidden_layers", 3},
          {"num_attention_heads", 4},        {"intermediate_size", 48},
          {"max_position_embeddings", 64},   {"global_attn_every_n_layers", 2},
          {"local_attention", 4},            {"pad_token_id", 0},
          {"classifier_pooling", "mean"},    {"mlp_dropout", 0.1},
          {"attention_dropout", 0.1},        {"num_labels", 2}};
}

class ModernBertRun : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.path() + "/modernbert";
    write_random_model(tiny_modernbert_config(), model_, 7);
    write_pair_task(tmp_.path() + "/train.jsonl", 96, 5);
    write_pair_task(tmp_.path() + "/val.jsonl", 32, 6);
  }
  std::string yaml(const std::string& run, const std::string& extra = "") {
    return write_train_yaml(tmp_.path(), run, model_, "  learning_rate: 3.0e-3\n" + extra);
  }
  TempDir tmp_;
  std::string model_;
};

TEST_F(ModernBertRun, TrainsPackedSavesLoadsAndPredicts) {
  const nlohmann::json s = run_training(TrainConfig::load(yaml("full")));
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["model"], "ModernBertForSequenceClassification");
  EXPECT_EQ(s["packing"]["on"], true);
  expect_learns(tmp_.path() + "/full");

  const std::string dir = tmp_.path() + "/full/model";
  const auto f = io::SafetensorsFile::open(dir + "/model.safetensors");
  EXPECT_TRUE(f.find("model.layers.1.attn_norm.weight"));
  EXPECT_FALSE(f.find("model.layers.0.attn_norm.weight"));  // HF's Identity on layer 0
  EXPECT_TRUE(f.find("model.layers.2.mlp.Wi.weight"));
  EXPECT_FALSE(f.find("model.layers.2.mlp.Wi.bias"));
  EXPECT_TRUE(f.find("head.norm.weight"));
  EXPECT_TRUE(f.find("classifier.bias"));
  const ModelSpec loaded = load_model_spec(dir);
  EXPECT_EQ(loaded.info().model_type, "modernbert");
  EXPECT_EQ(loaded.to_json()["classifier_pooling"], "mean");
  std::vector<data::TokenizedExample> rows(3);
  rows[0].input_ids = {101, 1996, 2204, 102};
  rows[1].input_ids = {101, 1996, 2417, 2482, 102, 2919, 102, 2204, 2919, 2482, 2417, 102};
  rows[2].input_ids = {101, 2204, 102};
  const Predictions a = predict_logits(dir, rows, 2, Device::cpu());
  const Predictions b = predict_logits(dir, rows, 3, Device::cpu());
  ASSERT_EQ(a.logits.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    for (size_t k = 0; k < 2; ++k) EXPECT_NEAR(a.logits[i][k], b.logits[i][k], 1e-5);
}

TEST_F(ModernBertRun, PackedAndPaddedRunsFollowTheSameTrajectory) {
  for (const char* packing : {"on", "off"}) {
    const std::string run = tmp_.path() + "/" + packing, path = run + ".yaml";
    std::ofstream(path) << "model:\n  path: " << model_ << "\ndata:\n  train: " << tmp_.path()
                        << "/train.jsonl\n  max_length: 24\n  packing: " << packing
                        << "\ntraining:\n  epochs: 2\n  effective_batch_size: 16\n"
                        << "  learning_rate: 1.0e-3\n  log_every: 1\n  threads: 2\n"
                        << "  hidden_dropout: 0.1\n  attention_dropout: 0.1\n"
                        << "  classifier_dropout: 0.1\noutput:\n  dir: " << run
                        << "\n  progress: plain\n";
    const nlohmann::json s = run_training(TrainConfig::load(path));
    EXPECT_EQ(s["packing"]["on"], std::string(packing) == "on");
  }
  // Per-step losses within 1e-6 relative, weights within 1e-5 of each tensor's largest value. (The
  // learning rate keeps the losses near 0.5: at 3e-3 the last steps' losses fall to 0.04, where
  // fp32 summation-order differences of ~5e-8 make 1.2e-6 relative.)
  expect_same_trajectory(tmp_.path() + "/on", tmp_.path() + "/off", {12, 1e-6, 1e-5});
}

TEST_F(ModernBertRun, LoraTrainsThePackedModel) {
  const nlohmann::json s = run_training(TrainConfig::load(
      yaml("lora", "peft:\n  method: lora\n  r: 4\n  alpha: 8\n"
                   "  target_modules: [Wqkv, Wo, Wi]\n")));
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["packing"]["on"], true);
  EXPECT_EQ(logged_train_losses(tmp_.path() + "/lora").size(), 18u);
}

// LoRA on every linear module with gradient checkpointing on packed micro-batches, in bf16 and in
// f16 (its loss scaling): per-step losses follow the fp32 LoRA run's, it learns, and it touches
// what it planned.
TEST_F(ModernBertRun, LoraIn16BitsWithCheckpointingFollowsFp32AndTouchesWhatItPlans) {
  expect_lora_16bit_runs_follow_fp32(tmp_.path(), [&](const std::string& run, const std::string& extra) {
    return run_training(TrainConfig::load(yaml(run, extra)));
  });
}

}  // namespace
}  // namespace ftune::test
