// The training configuration: a YAML file plus dotted command-line overrides
// (`training.learning_rate=3e-5`). Every key is typed and validated; an unknown or mistyped key is
// an InputError naming the file, the key and what was expected (with a suggestion for typos).
// The resolved configuration is saved in the run directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace ftune {

struct TrainConfig {
  struct Model {
    std::string path;                 // HF model directory (config.json, weights, tokenizer.json)
    std::vector<std::string> labels;  // label names in id order; empty: from the data
  } model;
  struct Data {
    std::string train, validation, test;  // JSONL files; validation and test optional
    std::string text_field = "text";
    std::string text_pair_field = "text_pair";
    std::string label_field = "label";
    int64_t max_length = 128;  // tokens per input, special tokens included (longest_first)
  } data;
  struct Training {
    int64_t epochs = 1;
    int64_t max_steps = 0;  // > 0 overrides epochs
    int64_t batch_size = 32;
    double learning_rate = 5e-5;
    double weight_decay = 0.01;
    double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8;
    double warmup_ratio = 0.1;
    std::string schedule = "linear";
    double max_grad_norm = 1.0;
    double label_smoothing = 0.0;
    std::vector<double> class_weights;
    uint64_t seed = 42;
    int64_t eval_every = 0;  // steps; 0: at the end of each epoch only
    int64_t log_every = 10;
    int64_t threads = 0;  // 0: all cores
  } training;
  struct Output {
    std::string dir = "runs/ftune";
  } output;

  YAML::Node resolved;  // the configuration after overrides, as saved in the run directory

  // Loads FILE and applies `overrides` ("a.b=value", value parsed as YAML).
  static TrainConfig load(const std::string& path, const std::vector<std::string>& overrides = {});
  // Parses YAML text (name labels errors).
  static TrainConfig parse(const YAML::Node& root, const std::string& name);
};

}  // namespace ftune
