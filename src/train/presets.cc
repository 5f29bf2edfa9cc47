// Model-family presets (see presets.h).
#include "train/presets.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "core/error.h"

namespace ftune {
namespace {

// Decoder LMs as classifiers: LoRA r 16 / alpha 32 / dropout 0.05 on all seven linear layers (the
// QLoRA paper's and PEFT / TRL examples' setting), a short warmup and cosine decay, one epoch, 512
// tokens; the score head trains whole (modules_to_save).
std::string decoder_preset(const char* learning_rate) {
  return fmt::format(R"(
data: {{max_length: 512}}
training: {{epochs: 1, effective_batch_size: 16, learning_rate: {}, warmup_ratio: 0.03,
           weight_decay: 0.01, schedule: cosine, max_grad_norm: 1.0}}
peft: {{method: lora, r: 16, alpha: 32, dropout: 0.05,
       target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]}})",
                     learning_rate);
}

// Causal-LM fine-tuning (model.task causal_lm, docs/causal-lm.md) on prompt -> completion rows:
// LoRA r 16 / alpha 32 / dropout 0.05 on every linear layer (all-linear: lm_head left out, as
// PEFT does), lr 2e-4, cosine after a 3% warmup, one epoch, 1,024 tokens (the recipe of TRL's SFT
// examples and QLoRA).
constexpr const char* kCausalLmPreset = R"(
model: {task: causal_lm}
data: {max_length: 1024}
training: {epochs: 1, effective_batch_size: 16, learning_rate: 2.0e-4, warmup_ratio: 0.03,
           weight_decay: 0.0, schedule: cosine, max_grad_norm: 1.0}
peft: {method: lora, r: 16, alpha: 32, dropout: 0.05, target_modules: all-linear})";

const std::map<std::string, std::string>& presets() {
  static const std::map<std::string, std::string> table = {
      {"lora-causal-lm", kCausalLmPreset},
      {"llama", decoder_preset("1.0e-4")},
      {"qwen", decoder_preset("1.0e-4")},
      // Gemma takes a lower rate (its (1 + w) norms and scaled embeddings make it sensitive).
      {"gemma", decoder_preset("5.0e-5")},
      {"bert", R"(
data: {max_length: 128}
training: {epochs: 3, effective_batch_size: 32, learning_rate: 3.0e-5, warmup_ratio: 0.1,
           weight_decay: 0.01, schedule: linear, max_grad_norm: 1.0})"},
      {"roberta", R"(
data: {max_length: 128}
training: {epochs: 3, effective_batch_size: 32, learning_rate: 2.0e-5, warmup_ratio: 0.06,
           weight_decay: 0.1, schedule: linear, max_grad_norm: 1.0, adam_beta2: 0.98,
           adam_epsilon: 1.0e-6})"},
      {"xlmr", R"(
data: {max_length: 256}
training: {epochs: 2, effective_batch_size: 16, learning_rate: 1.5e-5, warmup_ratio: 0.1,
           weight_decay: 0.01, schedule: linear, max_grad_norm: 1.0, layer_decay: 0.9})"},
      // BGE rerankers ship one logit (XLM-R, num_labels 1): the head is kept (train/score_task.h,
      // training.loss auto) and trained listwise as FlagEmbedding trains it when the data has
      // query groups (data.group_field or FlagEmbedding's nested JSONL; data.group_size rows a
      // group), else with binary cross-entropy on 0/1 relevance or soft targets: the score
      // FlagReranker and CrossEncoder read.
      {"bge-reranker", R"(
data: {max_length: 512}
training: {epochs: 2, effective_batch_size: 16, learning_rate: 1.0e-5, warmup_ratio: 0.1,
           weight_decay: 0.01, schedule: linear, max_grad_norm: 1.0, layer_decay: 0.9,
           loss: auto})"},
      {"minilm", R"(
data: {max_length: 128}
training: {epochs: 3, effective_batch_size: 32, learning_rate: 1.0e-4, warmup_ratio: 0.1,
           weight_decay: 0.01, schedule: linear, max_grad_norm: 1.0})"},
  };
  return table;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, _] : presets()) names.push_back(name);
  return names;
}

YAML::Node preset_defaults(const std::string& name, const std::string& where) {
  const auto it = presets().find(name);
  if (it == presets().end())
    throw InputError(fmt::format("{}: key 'preset' must be one of {}, got '{}'", where,
                                 fmt::join(preset_names(), ", "), name));
  return YAML::Load(it->second);
}

void fill_missing(YAML::Node dst, const YAML::Node& defaults) {
  for (const auto& kv : defaults) {
    const std::string key = kv.first.as<std::string>();
    if (!dst[key]) {
      dst[key] = YAML::Clone(kv.second);
    } else if (kv.second.IsMap() && dst[key].IsMap()) {
      fill_missing(dst[key], kv.second);
    }
  }
}

}  // namespace ftune
