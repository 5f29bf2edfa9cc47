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
// Module patterns follow PEFT: a list entry matches a module whose full name equals it or ends
// with "." + entry; a single string other than "all-linear" is a regular expression that must
// match the whole name. The linear modules of a layer are attention.self.{query,key,value},
// attention.output.dense, intermediate.dense and output.dense (which, as in PEFT, also matches
// attention.output.dense); "intermediate" and "attention.output" are accepted as short forms.
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
  // Whether the linear module `full_name` (e.g. "bert.encoder.layer.0.attention.self.query")
  // gets an adapter.
  bool targets(const std::string& full_name) const;
};

// Validates and reads the `peft:` section (`where` names it in messages, e.g. "train.yaml: peft").
// A scalar section (`peft: lora`) sets only the method. Throws InputError naming the key.
AdapterConfig parse_adapter_config(const YAML::Node& peft_section, const std::string& where);
// Compiles a single-string target_modules (a regular expression, matched against whole module
// names as PEFT's re.fullmatch); InputError naming `where` when it is invalid.
void validate_module_regex(const std::string& pattern, const std::string& where);
// off / on (also false / true) / auto.
GradientCheckpointing parse_gradient_checkpointing(const YAML::Node& value,
                                                   const std::string& where);

const char* peft_method_name(PeftMethod m);
const char* gradient_checkpointing_name(GradientCheckpointing c);  // off, on, auto

}  // namespace ftune
