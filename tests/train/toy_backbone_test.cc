// The backbone interface proven by a second family (toy_backbone.h: one layer, its own name map,
// adapter site and last-token pooling): its gradients against finite differences in both batch
// layouts, and a run that trains, plans, saves, loads and predicts through the same code as BERT
// (run_training, the memory planner, hf_checkpoint, the PEFT adapter files, predict_logits).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/memory.h"
#include "data/batcher.h"
#include "io/safetensors.h"
#include "models/batch.h"
#include "models/hf_checkpoint.h"
#include "models/param_init.h"
#include "models/predictor.h"
#include "test_util.h"
#include "tiny_model.h"
#include "toy_backbone.h"
#include "train/memory_planner.h"
#include "train/trainer.h"

namespace ftune::test {
namespace {

ModelSpec toy_spec() {
  register_toy_backbone();
  return model_spec_from_json({{"model_type", "ftune-toy"},
                               {"vocab_size", 50},
                               {"hidden_size", 8},
                               {"max_position_embeddings", 16},
                               {"num_labels", 3}},
                              "toy");
}

// Three rows of 5, 2 and 4 tokens, labelled.
Batch toy_batch() {
  Batch b;
  b.size = 3;
  b.seq_len = 5;
  const int lens[] = {5, 2, 4};
  for (int r = 0; r < 3; ++r) {
    for (int t = 0; t < 5; ++t) {
      b.input_ids.push_back(t < lens[r] ? 3 + 7 * r + t : 0);
      b.attention_mask.push_back(t < lens[r] ? 1 : 0);
    }
    b.labels.push_back(r);
  }
  return b;
}

struct Bound {
  std::unique_ptr<SequenceClassifier> model;
  std::unique_ptr<Arena> arena;
};

Bound bind_toy(bool packed) {
  ClassifierOptions o{3, 5, true};
  o.packed = packed;
  o.max_tokens = 15;
  Bound b;
  b.model = std::make_unique<SequenceClassifier>(toy_spec(), o);
  ArenaPlan plan;
  b.model->add_to_plan(plan);
  b.arena = std::make_unique<Arena>(Device::cpu(), std::move(plan));
  b.model->bind(*b.arena);
  init_all_params_like_hf(*b.model, 11);
  return b;
}

float loss_of(SequenceClassifier& m) {
  m.forward(DropoutPlan{});
  return to_host_scalar(m.loss({}));
}

TEST(ToyBackbone, GradientsMatchFiniteDifferencesInBothLayouts) {
  for (const bool packed : {false, true}) {
    SCOPED_TRACE(packed ? "packed" : "padded");
    Bound b = bind_toy(packed);
    SequenceClassifier& m = *b.model;
    m.set_batch(toy_batch());
    const float loss = loss_of(m);
    m.backward(DropoutPlan{});
    HostTensor grads(DType::F32, m.param_grads().shape);
    copy(grads.view(), m.param_grads());
    HostTensor values(DType::F32, m.param_values().shape);
    copy(values.view(), m.param_values());
    // A few elements of every parameter: central differences in fp32.
    double worst = 0;
    for (const ParamSpec& spec : m.params().specs())
      for (int64_t k : {int64_t{0}, spec.shape.numel() / 2, spec.shape.numel() - 1}) {
        const int64_t i = spec.offset + k;
        // Embedding rows of tokens the batch does not use have no gradient; pick used ones.
        const int64_t at = spec.name == "toy.embed.weight" ? 3 * 8 + k % 8 : i;
        const float v = values.data<float>()[at], eps = 1e-2f;
        auto loss_at = [&](float x) {
          copy(m.param_values().flat_range(at, 1), TensorView(&x, DType::F32, Device::cpu(), Shape{1}));
          m.frozen_weights_changed();
          return static_cast<double>(loss_of(m));
        };
        const double fd = (loss_at(v + eps) - loss_at(v - eps)) / (2 * eps);
        loss_at(v);
        const double g = grads.data<float>()[at];
        worst = std::max(worst, std::fabs(fd - g) / std::max(1e-2, std::fabs(g)));
        EXPECT_NEAR(g, fd, 2e-2 * std::max(1.0, std::fabs(fd))) << spec.name << "[" << k << "]";
      }
    std::printf("toy %s: loss %.6f, worst finite-difference relative error %.3g\n",
                packed ? "packed" : "padded", loss, worst);
  }
  // The two layouts compute the same loss.
  Bound padded = bind_toy(false), packed = bind_toy(true);
  padded.model->set_batch(toy_batch());
  packed.model->set_batch(toy_batch());
  EXPECT_NEAR(loss_of(*padded.model), loss_of(*packed.model), 1e-6);
}

class ToyRun : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.path() + "/toy";
    write_toy_model(model_);
    write_pair_task(tmp_.path() + "/train.jsonl", 96, 5);
    write_pair_task(tmp_.path() + "/val.jsonl", 32, 6);
  }
  nlohmann::json train(const std::string& run, const std::string& extra = "") {
    const std::string path = tmp_.path() + "/" + run + ".yaml";
    std::ofstream(path) << "model:\n  path: " << model_ << "\ndata:\n  train: " << tmp_.path()
                        << "/train.jsonl\n  validation: " << tmp_.path()
                        << "/val.jsonl\n  max_length: 24\n"
                        << "training:\n  epochs: 3\n  effective_batch_size: 16\n"
                        << "  learning_rate: 3.0e-2\n  log_every: 1\n  threads: 2\n"
                        << extra << "output:\n  dir: " << tmp_.path() << "/" << run
                        << "\n  progress: plain\n";
    return run_training(TrainConfig::load(path));
  }
  TempDir tmp_;
  std::string model_;
};

TEST_F(ToyRun, TrainsPlansSavesLoadsAndPredicts) {
  const nlohmann::json s = train("full");
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["model"], "ToyForSequenceClassification");
  const std::vector<double> losses = logged_train_losses(tmp_.path() + "/full");
  ASSERT_EQ(losses.size(), 18u);
  EXPECT_LT(losses.back(), losses.front());
  // The memory plan of the run (the planner ran through the interface): every category the toy
  // has, and a micro-batch chosen for the budget.
  EXPECT_GT(s["memory"]["planned"]["activations"].get<double>(), 0);
  EXPECT_GT(s["memory"]["planned"]["parameters"].get<double>(), 0);
  EXPECT_GE(s["micro_batch"].get<int64_t>(), 1);
  const PlanTarget target{load_model_spec(model_), {}, 24, 0, Device::cpu()};
  // A budget that holds 4 rows but not 5: the planner finds 4 (plan(4) <= budget < plan(5)).
  const size_t budget = plan_memory(target, 4, GradientCheckpointing::Off).total + 8;
  const BatchChoice choice = choose_batch(target, {16, 0, GradientCheckpointing::Off, budget});
  EXPECT_EQ(choice.micro_batch, 4);
  EXPECT_EQ(choice.accumulation, 4);
  EXPECT_GT(plan_memory(target, 5, GradientCheckpointing::Off).total, budget);

  // model/ is an HF directory of the toy family: its names, its config; loaded again, it
  // predicts what the trained model did on validation.
  const std::string dir = tmp_.path() + "/full/model";
  const auto f = io::SafetensorsFile::open(dir + "/model.safetensors");
  EXPECT_TRUE(f.find("toy.blocks.0.mix.weight"));
  EXPECT_TRUE(f.find("score.weight"));
  EXPECT_FALSE(f.find("score.bias"));
  const ModelSpec loaded = load_model_spec(dir);
  EXPECT_EQ(loaded.info().model_type, "ftune-toy");
  EXPECT_EQ(loaded.info().id2label, (std::vector<std::string>{"0", "1"}));
  std::vector<data::TokenizedExample> rows(3);
  rows[0].input_ids = {101, 1996, 2204, 102};
  rows[1].input_ids = {101, 1996, 2417, 2482, 102, 2919, 102};
  rows[2].input_ids = {101, 2204, 102};
  const Predictions a = predict_logits(dir, rows, 2, Device::cpu());
  const Predictions b = predict_logits(dir, rows, 3, Device::cpu());
  ASSERT_EQ(a.logits.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    for (size_t k = 0; k < 2; ++k) EXPECT_NEAR(a.logits[i][k], b.logits[i][k], 1e-5);
}

TEST_F(ToyRun, LoraOnItsOwnSiteSavesAPeftAdapter) {
  const nlohmann::json s =
      train("lora", "peft:\n  method: lora\n  r: 2\n  alpha: 4\n  dropout: 0.1\n"
                    "  target_modules: [mix]\n");
  EXPECT_EQ(s["peft"], "lora");
  // Adapter + head: 2 x 16 (A) + 16 x 2 (B) + the score's 2 x 16.
  EXPECT_EQ(s["trainable_parameters"], 96);
  const std::string adapter = tmp_.path() + "/lora/adapter";
  const auto f = io::SafetensorsFile::open(adapter + "/adapter_model.safetensors");
  EXPECT_TRUE(f.find("base_model.model.toy.blocks.0.mix.lora_A.weight"));
  EXPECT_TRUE(f.find("base_model.model.toy.blocks.0.mix.lora_B.weight"));
  EXPECT_TRUE(f.find("base_model.model.score.weight"));
  const auto cfg = nlohmann::json::parse(file_bytes(adapter + "/adapter_config.json"));
  EXPECT_EQ(cfg["target_modules"], nlohmann::json::array({"toy.blocks.0.mix"}));
  EXPECT_EQ(cfg["modules_to_save"], nlohmann::json::array({"score"}));
  // model/: the adapter merged into the base weights, a plain toy model.
  EXPECT_EQ(load_model_spec(tmp_.path() + "/lora/model").info().model_type, "ftune-toy");
}

}  // namespace
}  // namespace ftune::test
