// Loss bits of short fixed training runs, one line per logged step: the check that a refactoring
// of the model code changes no arithmetic (issue 38: "a run's losses are bit-identical before and
// after on a fixed config for each family"). Build it on both sides of the change, run each, and
// diff the outputs (tools/loss_bits.sh does both).
//
// For each family (BERT, RoBERTa, XLM-R, DeBERTa-v3, ModernBERT, Llama, Qwen3) it writes a tiny
// randomly initialised classifier (seeded, the MiniLM WordPiece tokenizer) and a synthetic pair
// task, then trains 6 steps on the CPU under each of: LoRA fp32, DoRA with adapter dropout fp32,
// LoRA bf16 with gradient checkpointing, DoRA with dropout bf16 with checkpointing, and full
// fine-tuning in fp32 and bf16 (the trained-weight gradient path); LoRA on all-linear, DoRA on
// every linear module and the pooler / head dense as well.
// Prints "LOSS family config step loss-as-hex-bits loss", and each run's planned memory.
//
//   loss_bits <source dir> <scratch dir> [family filter]
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "models/hf_checkpoint.h"
#include "models/param_init.h"
#include "models/sequence_classifier.h"
#include "train/trainer.h"

using namespace ftune;
using nlohmann::json;

namespace {

json base(const char* type) {
  return {{"model_type", type},         {"vocab_size", 30522},
          {"hidden_size", 32},          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},   {"intermediate_size", 48},
          {"max_position_embeddings", 64}, {"initializer_range", 0.2},
          {"pad_token_id", 0},          {"num_labels", 2}};
}

std::vector<std::pair<std::string, json>> families() {
  std::vector<std::pair<std::string, json>> f;
  json bert = base("bert");
  bert.update({{"type_vocab_size", 2}, {"hidden_act", "gelu"}, {"hidden_dropout_prob", 0.1},
               {"attention_probs_dropout_prob", 0.1}});
  f.emplace_back("bert", bert);
  json roberta = base("roberta");
  roberta.update({{"type_vocab_size", 2}, {"hidden_act", "gelu"}, {"hidden_dropout_prob", 0.1},
                  {"attention_probs_dropout_prob", 0.1}, {"pad_token_id", 1},
                  {"max_position_embeddings", 66}});
  f.emplace_back("roberta", roberta);
  json xlmr = roberta;
  xlmr["model_type"] = "xlm-roberta";
  f.emplace_back("xlmr", xlmr);
  json deberta = base("deberta-v2");
  deberta.update({{"type_vocab_size", 0}, {"relative_attention", true}, {"position_buckets", 8},
                  {"max_relative_positions", -1}, {"pos_att_type", "p2c|c2p"},
                  {"share_att_key", true}, {"norm_rel_ebd", "layer_norm"},
                  {"position_biased_input", false}, {"hidden_act", "gelu"},
                  {"hidden_dropout_prob", 0.1}, {"attention_probs_dropout_prob", 0.1},
                  {"pooler_hidden_size", 32}, {"pooler_dropout", 0.1},
                  {"pooler_hidden_act", "gelu"}});
  f.emplace_back("deberta", deberta);
  json modernbert = base("modernbert");
  modernbert.update({{"num_hidden_layers", 3}, {"global_attn_every_n_layers", 2},
                     {"local_attention", 4}, {"classifier_pooling", "mean"},
                     {"mlp_dropout", 0.1}, {"attention_dropout", 0.1}});
  f.emplace_back("modernbert", modernbert);
  json llama = base("llama");
  llama.update({{"architectures", {"LlamaForSequenceClassification"}},
                {"num_key_value_heads", 2}, {"rms_norm_eps", 1e-6}, {"hidden_act", "silu"},
                {"rope_theta", 10000.0}, {"attention_dropout", 0.1}, {"bos_token_id", 101},
                {"eos_token_id", 102}});
  f.emplace_back("llama", llama);
  json qwen3 = llama;
  qwen3["model_type"] = "qwen3";
  qwen3["architectures"] = {"Qwen3ForSequenceClassification"};
  qwen3["head_dim"] = 8;
  f.emplace_back("qwen3", qwen3);
  return f;
}

void write_model(const json& config, const std::string& dir, const std::string& source) {
  SequenceClassifier model(model_spec_from_json(config, "tiny"), {1, 1, false});
  ArenaPlan plan;
  model.add_to_plan(plan);
  Arena arena(Device::cpu(), std::move(plan));
  model.bind(arena);
  init_all_params_like_hf(model, 11);
  save_model(model, dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(source + "/tests/fixtures/tokenizers/minilm/" + f, dir + "/" + f,
                               std::filesystem::copy_options::overwrite_existing);
}

void write_pairs(const std::string& path, int n, uint64_t seed) {
  const char* words[] = {"red", "green", "car", "house", "bird",
                         "apple", "river", "chair", "book", "cloud"};
  std::mt19937_64 rng(seed);
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) {
    const bool good = rng() % 2 == 0;
    std::string text = "the", pair = good ? "good" : "bad";
    for (int w = 0, k = 1 + static_cast<int>(rng() % 5); w < k; ++w)
      text += std::string(" ") + words[rng() % 10];
    for (int w = 0, k = static_cast<int>(rng() % 4); w < k; ++w)
      pair += std::string(" ") + words[rng() % 10];
    out << json{{"text", text}, {"text_pair", pair}, {"label", good ? 1 : 0}}.dump() << "\n";
  }
}

const std::vector<std::pair<std::string, std::string>>& configs() {
  // DoRA on every linear layer and the head's dense / pooler too (all-linear leaves the head out):
  // one string is a regex over whole module names.
  static const std::string heads =
      "'.*[.](query|key|value|dense|query_proj|key_proj|value_proj|Wqkv|Wo|Wi|q_proj|k_proj|"
      "v_proj|o_proj|gate_proj|up_proj|down_proj)'";
  static const std::string lora =
      "peft:\n  method: lora\n  r: 4\n  alpha: 8\n  dropout: 0.0\n  target_modules: all-linear\n";
  static const std::string dora =
      "peft:\n  method: dora\n  r: 4\n  alpha: 8\n  dropout: 0.1\n  target_modules: " + heads + "\n";
  static const std::vector<std::pair<std::string, std::string>> c = {
      {"lora_fp32", "  precision: fp32\n" + lora},
      {"dora_fp32", "  precision: fp32\n" + dora},
      {"lora_bf16_ckpt", "  precision: bf16\n  gradient_checkpointing: on\n" + lora},
      {"dora_bf16_ckpt", "  precision: bf16\n  gradient_checkpointing: on\n" + dora},
      {"full_fp32", "  precision: fp32\n"},
      {"full_bf16", "  precision: bf16\n"},
  };
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <source dir> <scratch dir> [family]\n", argv[0]);
    return 2;
  }
  const std::string source = argv[1], dir = argv[2], only = argc > 3 ? argv[3] : "";
  std::filesystem::create_directories(dir);
  write_pairs(dir + "/train.jsonl", 48, 5);
  write_pairs(dir + "/val.jsonl", 16, 6);
  for (const auto& [family, config] : families()) {
    if (!only.empty() && family != only) continue;
    const std::string model = dir + "/" + family;
    write_model(config, model, source);
    for (const auto& [name, training] : configs()) {
      const std::string run = dir + "/" + family + "_" + name;
      std::filesystem::remove_all(run);
      const std::string yaml = run + ".yaml";
      std::ofstream(yaml) << "model:\n  path: " << model << "\ndata:\n  train: " << dir
                          << "/train.jsonl\n  validation: " << dir
                          << "/val.jsonl\n  max_length: 24\ntraining:\n  epochs: 1\n"
                          << "  effective_batch_size: 8\n  batch_size: 8\n  log_every: 1\n"
                          << "  threads: 2\n  learning_rate: 3.0e-3\n  memory_budget: 1GiB\n"
                          << training << "output:\n  dir: " << run << "\n  progress: plain\n";
      try {
        const json summary = run_training(TrainConfig::load(yaml));
        // The plan too: a refactoring of the buffers keeps every byte of it.
        std::printf("LOSS %s %s plan %s\n", family.c_str(), name.c_str(),
                    summary["memory"]["planned"].dump().c_str());
      } catch (const std::exception& e) {
        std::printf("LOSS %s %s error %s\n", family.c_str(), name.c_str(), e.what());
        continue;
      }
      std::ifstream in(run + "/metrics.jsonl");
      int step = 0;
      for (std::string line; std::getline(in, line);) {
        const json j = json::parse(line);
        if (j["split"] != "train") continue;
        const double loss = j["loss"].get<double>();
        uint64_t bits;
        std::memcpy(&bits, &loss, sizeof bits);
        std::printf("LOSS %s %s %d %016llx %.9g\n", family.c_str(), name.c_str(), ++step,
                    static_cast<unsigned long long>(bits), loss);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
