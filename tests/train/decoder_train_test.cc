// A tiny Llama classifier (GQA, attention dropout) trained end to end through run_training with
// LoRA on every linear layer, bf16 compute (the frozen base stored only in bf16) and gradient
// checkpointing: its per-step losses follow the fp32 LoRA run's within the DESIGN's bf16
// tolerance, it learns, the summary names the precision, and the run touches what it planned; with
// checkpointing off the losses are the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "precision_run.h"
#include "test_util.h"
#include "tiny_model.h"
#include "train/trainer.h"

namespace ftune::test {
namespace {

nlohmann::json tiny_llama_config() {
  return {{"model_type", "llama"},          {"architectures", {"LlamaForSequenceClassification"}},
          {"vocab_size", 30522},            {"hidden_size", 32},
          {"num_hidden_layers", 2},         {"num_attention_heads", 4},
          {"num_key_value_heads", 2},       {"intermediate_size", 64},
          {"max_position_embeddings", 64},  {"rms_norm_eps", 1e-6},
          {"hidden_act", "silu"},           {"rope_theta", 10000.0},
          {"attention_dropout", 0.1},       {"initializer_range", 0.2},
          {"pad_token_id", 0},              {"bos_token_id", 101},
          {"eos_token_id", 102},            {"num_labels", 2}};
}

class DecoderTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.path() + "/llama";
    write_random_model(tiny_llama_config(), model_, 9);
    write_pair_task(tmp_.path() + "/train.jsonl", 96, 5);
    write_pair_task(tmp_.path() + "/val.jsonl", 32, 6);
  }
  nlohmann::json train(const std::string& run, const std::string& extra) {
    const std::string peft =
        "peft:\n  method: lora\n  r: 4\n  alpha: 8\n  dropout: 0.1\n  target_modules: all-linear\n";
    return run_training(TrainConfig::load(write_train_yaml(
        tmp_.path(), run, model_,
        "  learning_rate: 3.0e-3\n  batch_size: 8\n  memory_budget: 1GiB\n" +
            extra + peft)));
  }
  TempDir tmp_;
  std::string model_;
};

TEST_F(DecoderTrain, LoraInBf16WithCheckpointingFollowsFp32AndTouchesWhatItPlans) {
  train("fp32", "  precision: fp32\n  gradient_checkpointing: on\n");
  const nlohmann::json s16 = train("bf16", "  precision: bf16\n  gradient_checkpointing: on\n");
  expect_16bit_run_follows_fp32(tmp_.path() + "/fp32", tmp_.path() + "/bf16", s16, "bf16", 0.03);
  const std::vector<double> b = logged_train_losses(tmp_.path() + "/bf16");
  const nlohmann::json m = s16["memory"];
  const nlohmann::json s_off = train("off", "  precision: bf16\n  gradient_checkpointing: off\n");
  EXPECT_EQ(logged_train_losses(tmp_.path() + "/off"), b);
  EXPECT_GT(s_off["memory"]["planned"]["activations"].get<double>(),
            m["planned"]["activations"].get<double>());
}

}  // namespace
}  // namespace ftune::test
