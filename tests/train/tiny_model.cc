// Tiny model writer (see tiny_model.h).
#include "tiny_model.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>

#include <fstream>

#include <filesystem>

#include "models/hf_checkpoint.h"
#include "models/param_init.h"
#include "test_util.h"

namespace ftune::test {

void write_tiny_bert(const std::string& dir, int num_labels, int vocab_size) {
  nlohmann::json j = {{"model_type", "bert"},
                      {"vocab_size", vocab_size},
                      {"hidden_size", 32},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 4},
                      {"intermediate_size", 64},
                      {"max_position_embeddings", 64},
                      {"type_vocab_size", 2},
                      {"hidden_act", "gelu"},
                      {"hidden_dropout_prob", 0.1},
                      {"attention_probs_dropout_prob", 0.1},
                      {"initializer_range", 0.02},
                      {"num_labels", num_labels},
                      {"pad_token_id", 0}};
  write_random_model(j, dir, 3);
}

void write_random_model(const nlohmann::json& config, const std::string& dir, uint64_t seed) {
  SequenceClassifier model(model_spec_from_json(config, "tiny"), {1, 1, false});
  ArenaPlan plan;
  model.add_to_plan(plan);
  Arena arena(Device::cpu(), std::move(plan));
  model.bind(arena);
  init_all_params_like_hf(model, seed);
  save_model(model, dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(fixtures_dir() + "/tokenizers/minilm/" + f, dir + "/" + f,
                               std::filesystem::copy_options::overwrite_existing);
}

void write_random_causal_lm(const nlohmann::json& config, const std::string& dir, uint64_t seed) {
  SequenceClassifier model(model_spec_from_json(config, "tiny").as_causal_lm(), {1, 1, false});
  ArenaPlan plan;
  model.add_to_plan(plan);
  Arena arena(Device::cpu(), std::move(plan));
  model.bind(arena);
  init_all_params_like_hf(model, seed);
  save_model(model, dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(fixtures_dir() + "/tokenizers/minilm/" + f, dir + "/" + f,
                               std::filesystem::copy_options::overwrite_existing);
}

std::string write_train_yaml(const std::string& dir, const std::string& run,
                             const std::string& model, const std::string& training) {
  const std::string path = dir + "/" + run + ".yaml";
  std::ofstream(path) << "model:\n  path: " << model << "\ndata:\n  train: " << dir
                      << "/train.jsonl\n  validation: " << dir << "/val.jsonl\n  max_length: 24\n"
                      << "training:\n  epochs: 3\n  effective_batch_size: 16\n"
                      << "  log_every: 1\n  threads: 2\n"
                      << training << "output:\n  dir: " << dir << "/" << run
                      << "\n  progress: plain\n";
  return path;
}

void write_pair_task(const std::string& path, int n, uint64_t seed) {
  const char* words[] = {"red",   "green", "car",   "house", "bird",
                         "apple", "river", "chair", "book",  "cloud"};
  std::mt19937_64 rng(seed);
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) {
    const bool good = rng() % 2 == 0;
    std::string text = "the", pair = good ? "good" : "bad";
    for (int w = 0, k = 1 + static_cast<int>(rng() % 5); w < k; ++w)
      text += std::string(" ") + words[rng() % 10];
    for (int w = 0, k = static_cast<int>(rng() % 4); w < k; ++w)
      pair += std::string(" ") + words[rng() % 10];
    out << nlohmann::json{{"text", text}, {"text_pair", pair}, {"label", good ? 1 : 0}}.dump()
        << "\n";
  }
}

void write_query_groups(const std::string& path, int groups, uint64_t seed, bool teacher) {
  const std::string source = path + ".rows";
  write_pair_task(source, groups * 6 * 3, seed);
  std::vector<nlohmann::json> good, bad;
  {
    std::ifstream in(source);
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line);
      (j["label"] == 1 ? good : bad).push_back(j);
    }
  }
  std::filesystem::remove(source);
  std::ofstream out(path);
  size_t good_at = 0, bad_at = 0;
  for (int g = 0; g < groups; ++g) {
    const bool flipped = g % 3 == 0;
    std::vector<nlohmann::json> rows{flipped ? bad.at(bad_at++) : good.at(good_at++)};
    for (int k = 0; k < 2 + g % 4; ++k)
      rows.push_back(flipped ? good.at(good_at++) : bad.at(bad_at++));
    for (size_t r = 0; r < rows.size(); ++r) {
      nlohmann::json row = rows[r];
      row["label"] = r == 0 ? 1 : 0;
      row["qid"] = "q" + std::to_string(g);
      if (teacher)
        row["teacher"] = r == 0 ? 2.5 + 0.1 * (g % 5) : -1.0 - 0.3 * double(r) + 0.1 * (g % 3);
      out << row.dump() << "\n";
    }
  }
}

std::vector<std::string> logged_metrics(const std::string& run_dir) {
  std::vector<std::string> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    for (const char* k : {"seconds", "samples_per_s", "tokens_per_s", "input_wait_fraction",
                          "gpu_util_percent", "gpu_memory_used_bytes"})
      j.erase(k);
    out.push_back(j.dump());
  }
  return out;
}

std::vector<double> logged_train_losses(const std::string& run_dir) {
  std::vector<double> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["split"] == "train") out.push_back(j["loss"].get<double>());
  }
  return out;
}

void expect_learns(const std::string& run_dir) {
  const std::vector<double> losses = logged_train_losses(run_dir);
  ASSERT_EQ(losses.size(), 18u);
  double first = 0, last = 0;
  for (int i = 0; i < 6; ++i) first += losses[i], last += losses[12 + i];
  EXPECT_LT(last, first - 0.03);
}

}  // namespace ftune::test
