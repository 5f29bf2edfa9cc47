// Configuration of parameter-efficient fine-tuning (LoRA / DoRA, as PEFT's LoraConfig) and of
// gradient checkpointing, with validation of the training YAML's `peft:` section.
//
//   peft:
//     method: dora            # none | lora | dora
//     r: 8                    # rank (> 0)
//     alpha: 16               # lora_alpha (> 0); scaling alpha / r, or alpha / sqrt(r) with rsLoRA
//     dropout: 0.05           # lora_dropout in [0, 1)
//     target_modules: [query, value]   # PEFT names (suffix match), "all-linear", or a regex string
//     use_rslora: false
//     modules_to_save: [classifier]    # classifier (always trained, as PEFT's SEQ_CLS), pooler
//
// The same names mean the same modules as in PEFT 0.21 (tuners_utils.check_target_module_exists,
// _maybe_include_all_linear_layers), over the module tree of HF's *ForSequenceClassification
// (each family's list: Backbone::modules(), e.g. models/bert/bert_family.h):
//   - a list entry matches a module whose full name equals it or ends with "." + entry; a single
//     string is "all-linear" (any case) or a regular expression that must match the whole name;
//   - "all-linear" is every nn.Linear but the classification head ("classifier");
//   - no adapter goes inside a module of modules_to_save (SEQ_CLS adds classifier and score), so
//     RoBERTa's classifier.dense never gets one, nor BERT's pooler.dense with "pooler" saved.
// So [query, value, dense] and all-linear adapt bert.pooler.dense (BERT's pooler; RoBERTa and
// XLM-R classifiers have none). A target that matches a module PEFT cannot or ftune does not
// adapt (a container such as "intermediate", a LayerNorm, an embedding) is an error naming it.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ftune {

enum class PeftMethod { None, Lora, Dora };
// Auto is a training setting only: the memory planner resolves it to Off or On before a model is
// built (train/memory_planner.h).
enum class GradientCheckpointing { Off, On, Auto };

struct AdapterConfig {
  PeftMethod method = PeftMethod::None;
  int64_t r = 8;
  double alpha = 8.0;
  double dropout = 0.0;
  std::vector<std::string> target_modules = {"query", "value"};  // PEFT's default for BERT
  std::string target_regex;  // set instead of target_modules when given as one regex string
  bool use_rslora = false;
  std::vector<std::string> modules_to_save = {"classifier"};

  bool enabled() const { return method != PeftMethod::None; }
  bool dora() const { return method == PeftMethod::Dora; }
  float scaling() const;       // alpha / r, or alpha / sqrt(r) with rsLoRA
  bool trains_pooler() const;  // "pooler" in modules_to_save (BERT's pooler.dense)
  // Whether the adaptable linear module `full_name` (e.g. "bert.encoder.layer.0.attention.self.
  // query", "bert.pooler.dense") gets an adapter: PEFT's rule above.
  bool targets(const std::string& full_name) const;
  // Whether `full_name` lies inside a module of modules_to_save (PEFT then adapts nothing there).
  bool saved_whole(const std::string& full_name) const;
};

// A named module of an HF sequence classifier, and what ftune can do with it as a PEFT target.
enum class ModuleKind {
  Adaptable,  // a linear layer with a LoRA / DoRA site in ftune
  Head,       // the classification head's linear layers (always in modules_to_save)
  Embedding,  // nn.Embedding: PEFT adapts it (lora_embedding_A/B), ftune does not
  Other,      // containers, LayerNorm, dropout, activations: PEFT refuses them as targets
  Output,     // a causal LM's lm_head: all-linear leaves it out (as PEFT does); ftune adapts it not
};
struct ClassifierModule {
  std::string name;
  ModuleKind kind;
};
// Appends the modules a BERT-style layer (BERT, RoBERTa, XLM-R, DeBERTa) has after its q/k/v
// projections, under `layer` ("bert.encoder.layer.3"): the attention's dropout, its output
// projection and LayerNorm, the intermediate and output blocks, in HF's tree order.
void add_bert_layer_tail_modules(std::vector<ClassifierModule>& modules, const std::string& layer);
// The modules `config` adapts in that tree, as PEFT resolves its target_modules (in tree order).
// InputError (naming `where`) when a target matches a module ftune cannot adapt, when a list
// entry matches no module, or when nothing is adapted; the message lists what would be.
std::vector<std::string> resolve_target_modules(const AdapterConfig& config,
                                                const std::vector<ClassifierModule>& modules,
                                                const std::string& where);

// The keys of the `peft:` section, declared once: the reader checks names against them and the
// training key table (train/config_keys.h) lists them with their help and defaults.
struct AdapterKey {
  const char* key;   // under peft: "r"
  const char* type;  // for people
  const char* help;
  std::string (*show)(const AdapterConfig& defaults);  // the default as a user writes it
};
const std::vector<AdapterKey>& adapter_config_keys();

// Validates and reads the `peft:` section (`where` names it in messages, e.g. "train.yaml: peft").
// A scalar section (`peft: lora`) sets only the method. Throws InputError naming the key.
AdapterConfig parse_adapter_config(const YAML::Node& peft_section, const std::string& where);
// PEFT's shorthand for every linear layer but the head: "all-linear" in any case (PEFT lowercases
// a target_modules string before comparing it).
bool is_all_linear(const std::string& target);
// Compiles a single-string target_modules (a regular expression, matched against whole module
// names as PEFT's re.fullmatch); InputError naming `where` when it is invalid.
void validate_module_regex(const std::string& pattern, const std::string& where);
// off / on (also false / true) / auto.
GradientCheckpointing parse_gradient_checkpointing(const YAML::Node& value,
                                                   const std::string& where);

const char* peft_method_name(PeftMethod m);
const char* gradient_checkpointing_name(GradientCheckpointing c);  // off, on, auto

}  // namespace ftune
