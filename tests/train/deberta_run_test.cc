// The DeBERTa-v2/v3 family end to end: a tiny DeBERTa-v3-shaped classifier (relative attention
// with log buckets shorter than the rows, shared position projections, norm_rel_ebd, no absolute
// positions, no token types) trains through run_training (the memory planner, micro-batches,
// dropout on), saves an HF directory under its own names, and predicts from it; with DoRA through
// the run loop it trains the adapters (positional calls of key_proj / query_proj included) and
// saves them in PEFT's format; gradient checkpointing gives the same losses as without; packed
// micro-batches (relative positions per row) follow the padded run within 1e-6 (losses) and 1e-5
// (weights), dropout on, and in bf16 with LoRA within bounds derived for bf16; LoRA in bf16 and f16
// with checkpointing follows the fp32 run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

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

nlohmann::json tiny_deberta_config() {
  return {{"model_type", "deberta-v2"},
          {"vocab_size", 30522},
          {"hidden_size", 32},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"intermediate_size", 64},
          {"max_position_embeddings", 64},
          {"type_vocab_size", 0},
          {"relative_attention", true},
          {"position_buckets", 8},
          {"max_relative_positions", -1},
          {"pos_att_type", "p2c|c2p"},
          {"share_att_key", true},
          {"norm_rel_ebd", "layer_norm"},
          {"position_biased_input", false},
          {"hidden_dropout_prob", 0.1},
          {"attention_probs_dropout_prob", 0.1},
          {"num_labels", 2}};
}

class DebertaRun : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.path() + "/deberta";
    write_random_model(tiny_deberta_config(), model_, 7);
    write_pair_task(tmp_.path() + "/train.jsonl", 96, 5);
    write_pair_task(tmp_.path() + "/val.jsonl", 32, 6);
  }
  std::string yaml(const std::string& run, const std::string& extra = "") {
    return write_train_yaml(tmp_.path(), run, model_, "  learning_rate: 3.0e-3\n" + extra);
  }
  TempDir tmp_;
  std::string model_;
};

TEST_F(DebertaRun, TrainsSavesLoadsAndPredicts) {
  const nlohmann::json s = run_training(TrainConfig::load(yaml("full")));
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["model"], "DebertaV2ForSequenceClassification");
  expect_learns(tmp_.path() + "/full");
  EXPECT_GT(s["memory"]["planned"]["activations"].get<double>(), 0);

  const std::string dir = tmp_.path() + "/full/model";
  const auto f = io::SafetensorsFile::open(dir + "/model.safetensors");
  EXPECT_TRUE(f.find("deberta.encoder.rel_embeddings.weight"));
  EXPECT_TRUE(f.find("deberta.encoder.layer.1.attention.self.key_proj.bias"));
  EXPECT_TRUE(f.find("pooler.dense.weight"));
  EXPECT_FALSE(f.find("deberta.embeddings.position_embeddings.weight"));
  const ModelSpec loaded = load_model_spec(dir);
  EXPECT_EQ(loaded.info().model_type, "deberta-v2");
  EXPECT_EQ(loaded.to_json()["position_buckets"], 8);
  std::vector<data::TokenizedExample> rows(3);
  rows[0].input_ids = {101, 1996, 2204, 102};
  rows[1].input_ids = {101, 1996, 2417, 2482, 102, 2919, 102, 2204, 2919, 2482, 2417, 102};
  rows[2].input_ids = {101, 2204, 102};
  // Batches of other shapes (padding, row count) give the same logits.
  const Predictions a = predict_logits(dir, rows, 2, Device::cpu());
  const Predictions b = predict_logits(dir, rows, 3, Device::cpu());
  ASSERT_EQ(a.logits.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    for (size_t k = 0; k < 2; ++k) EXPECT_NEAR(a.logits[i][k], b.logits[i][k], 1e-5);
}

TEST_F(DebertaRun, GradientCheckpointingGivesTheSameLosses) {
  run_training(TrainConfig::load(yaml("plain", "  gradient_checkpointing: off\n")));
  run_training(TrainConfig::load(yaml("ckpt", "  gradient_checkpointing: on\n")));
  EXPECT_EQ(logged_train_losses(tmp_.path() + "/plain"),
            logged_train_losses(tmp_.path() + "/ckpt"));
}

TEST_F(DebertaRun, TrainsDoraAdaptersAndSavesThemForPeft) {
  const nlohmann::json s = run_training(
      TrainConfig::load(yaml("dora",
                             "peft:\n  method: dora\n  r: 4\n  alpha: 8\n  dropout: 0.1\n"
                             "  target_modules: [query_proj, key_proj, value_proj, dense]\n")));
  EXPECT_EQ(s["status"], "completed");
  const std::vector<double> losses = logged_train_losses(tmp_.path() + "/dora");
  ASSERT_EQ(losses.size(), 18u);
  double first = 0, last = 0;
  for (int i = 0; i < 6; ++i) first += losses[i], last += losses[12 + i];
  EXPECT_LT(last, first);
  const auto f = io::SafetensorsFile::open(tmp_.path() + "/dora/adapter/adapter_model.safetensors");
  EXPECT_TRUE(f.find(
      "base_model.model.deberta.encoder.layer.1.attention.self.key_proj.lora_magnitude_vector"));
  EXPECT_TRUE(f.find("base_model.model.pooler.dense.lora_A.weight"));
  EXPECT_FALSE(f.find("base_model.model.deberta.encoder.rel_embeddings.weight"));
}

// Packed (rows back to back, the attention op row by row) and padded runs of the same steps, with
// hidden, attention and classifier dropout on (0.1) and DoRA dropout in the second pair: per-step
// losses within 1e-6 relative, weights within 1e-5 of each tensor's largest value.
TEST_F(DebertaRun, PackedAndPaddedRunsFollowTheSameTrajectory) {
  const std::string dora =
      "peft:\n  method: dora\n  r: 4\n  alpha: 8\n  dropout: 0.2\n"
      "  target_modules: [query_proj, key_proj, value_proj, dense]\n";
  for (const auto& [name, extra, weights] :
       {std::tuple<std::string, std::string, std::string>{"full", "", "/model/model.safetensors"},
        {"dora", dora, "/adapter/adapter_model.safetensors"}}) {
    SCOPED_TRACE(name);
    const std::string path = yaml(name, "  batch_size: 16\n  classifier_dropout: 0.1\n" + extra);
    const std::string run = tmp_.path() + "/" + name;
    const nlohmann::json padded = run_training(
        TrainConfig::load(path, {"data.packing=off", "output.dir=" + run + "_padded"}));
    const nlohmann::json packed =
        run_training(TrainConfig::load(path, {"data.packing=on", "output.dir=" + run + "_packed"}));
    EXPECT_EQ(packed["packing"]["on"], true);
    EXPECT_EQ(padded["packing"]["on"], false);
    EXPECT_EQ(packed["padding_fraction"].get<double>(), 0.0);
    TrajectoryTolerance tol;
    tol.steps = 18;
    tol.weights_file = weights;
    expect_same_trajectory(run + "_padded", run + "_packed", tol);
  }
}

// The same in bf16 storage (16-bit GEMMs, activations and frozen base), LoRA on every linear module
// with its dropout (0.1), checkpointing off and on. Both runs round the same fp32 values to bf16,
// so they differ only where fp32's summation order (~1e-7 relative, the fp32 test's noise) flips a
// bf16 rounding: one element by one bf16 ulp (2^-8 relative). The losses stay near fp32's
// agreement: 1e-5 relative, ten times the fp32 bound (measured 8.7e-8). A weight moves by about lr
// per Adam step, and a flip changes a step's gradient element, hence its update, by at most about
// one ulp relative: 18 steps x lr 3e-3 x 2^-8 = 2.1e-4, 2.3e-2 of the LoRA B tensors' largest
// value (~0.009), so 2e-2 (the DESIGN's bf16 tolerance; measured 5.5e-4). Broken packing fails
// both by far: a packed row's attention one token short gave losses 3.6e-5 and weights 1.33 apart,
// its attention dropout read at the next row's place 2.4e-5 and 0.91.
TEST_F(DebertaRun, PackedAndPaddedBf16RunsFollowTheSameTrajectory) {
  const std::string lora =
      "peft:\n  method: lora\n  r: 4\n  alpha: 8\n  dropout: 0.1\n  target_modules: all-linear\n";
  for (const char* checkpointing : {"off", "on"}) {
    SCOPED_TRACE(checkpointing);
    const std::string name = std::string("bf16_ckpt_") + checkpointing;
    const std::string path = yaml(name, "  batch_size: 16\n  classifier_dropout: 0.1\n"
                                        "  precision: bf16\n  gradient_checkpointing: " +
                                            std::string(checkpointing) + "\n" + lora);
    const std::string run = tmp_.path() + "/" + name;
    const nlohmann::json padded = run_training(
        TrainConfig::load(path, {"data.packing=off", "output.dir=" + run + "_padded"}));
    const nlohmann::json packed =
        run_training(TrainConfig::load(path, {"data.packing=on", "output.dir=" + run + "_packed"}));
    EXPECT_EQ(packed["precision"], "bf16");
    EXPECT_EQ(packed["gradient_checkpointing"], std::string(checkpointing) == "on");
    EXPECT_EQ(packed["packing"]["on"], true);
    EXPECT_EQ(padded["packing"]["on"], false);
    EXPECT_EQ(packed["padding_fraction"].get<double>(), 0.0);
    EXPECT_GT(padded["padding_fraction"].get<double>(), 0.05);
    expect_same_trajectory(run + "_padded", run + "_packed",
                           {18, 1e-5, 2e-2, "/adapter/adapter_model.safetensors"});
  }
}

// LoRA on every linear module with gradient checkpointing, in bf16 and in f16 (its loss scaling):
// per-step losses follow the fp32 LoRA run's, it learns, and it touches what it planned.
TEST_F(DebertaRun, LoraIn16BitsWithCheckpointingFollowsFp32AndTouchesWhatItPlans) {
  expect_lora_16bit_runs_follow_fp32(tmp_.path(), [&](const std::string& run, const std::string& extra) {
    return run_training(TrainConfig::load(yaml(run, extra)));
  });
}

}  // namespace
}  // namespace ftune::test
