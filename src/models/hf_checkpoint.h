// Loading and saving Hugging Face model directories for SequenceClassifier, for any family: the
// family (models/backbone.h) names its parameters, the aliases a checkpoint may use for them and
// which may be freshly initialised.
//
// Loading accepts what users bring: a *ForSequenceClassification checkpoint, or a base encoder
// (BertModel / RobertaModel / XLMRobertaModel, whose weights have no "bert." / "roberta." prefix
// as sentence-transformers saves them), single-file or sharded, stored in f32, f16 or bf16, with
// legacy LayerNorm gamma/beta names. A missing head (or BERT pooler) is freshly initialised as HF
// does — normal(0, initializer_range) weights, zero biases — and reported. A missing encoder
// weight, a shape or dtype mismatch, or a corrupt file is an InputError naming the file, the
// tensor and what was expected. Keys the model does not use (MLM heads, position_ids buffers,
// a RoBERTa pooler) are reported as unexpected and ignored.
//
// Saving writes config.json and model.safetensors with HF's names, so
// AutoModelForSequenceClassification.from_pretrained(dir) loads it and gives the same logits.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/sequence_classifier.h"

namespace ftune {

struct LoadOptions {
  // Overrides the checkpoint's labels (names) or just their count (LABEL_i names).
  std::optional<std::vector<std::string>> labels;
  std::optional<int64_t> num_labels;
  // A checkpoint head whose label count differs from the model's is replaced by a fresh one
  // (HF's ignore_mismatched_sizes); otherwise that mismatch is an error.
  bool reinit_mismatched_head = false;
  uint64_t init_seed = 42;  // for freshly initialised head weights
  // Warn about parameters initialised afresh. A resume turns it off: the checkpoint it restores
  // next replaces them, so nothing stays newly initialised.
  bool warn_initialised = true;
  // Read the model as a causal LM (ModelSpec::as_causal_lm: a *ForCausalLM checkpoint, or a base
  // decoder whose tied embedding is its head); labels do not apply. An untied checkpoint without
  // lm_head.weight is an InputError.
  bool causal_lm = false;
};

struct LoadReport {
  std::string weights_path;
  std::vector<std::string> initialised;    // model parameters not found in the checkpoint
  std::vector<std::string> unexpected;     // checkpoint tensors the model does not use
  std::vector<std::string> stored_dtypes;  // distinct dtypes of the loaded tensors ("F32", "BF16")
};

// Reads DIR/config.json, picks the family by its model_type and applies the label overrides.
ModelSpec load_model_spec(const std::string& dir, const LoadOptions& options = {});
// DIR/config.json's path; an InputError when DIR or the file does not exist.
std::string model_config_path(const std::string& dir);

// Fills model.param_values() from DIR's weights (the model must be bound).
LoadReport load_model_weights(SequenceClassifier& model, const std::string& dir,
                              const LoadOptions& options = {});

// Writes DIR/config.json and DIR/model.safetensors (each atomically; DIR is created if needed).
void save_model(const SequenceClassifier& model, const std::string& dir);
// The same, writing the parameters named in `values` from those views (any dtype and device)
// instead of the model's.
void save_model(const SequenceClassifier& model, const std::string& dir,
                const std::map<std::string, TensorView>& values);

}  // namespace ftune
