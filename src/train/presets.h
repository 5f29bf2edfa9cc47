// Recommended training defaults per model family, selected with a top-level `preset:` key. A preset
// only fills keys the user did not set; every value stays overridable. The numbers follow the
// families' papers and model cards (BERT: lr 2e-5..5e-5, warmup 10%; RoBERTa: lr 1e-5..3e-5,
// warmup 6%, decay 0.1; XLM-R / BGE-reranker: lr 1e-5..2e-5, longer inputs; MiniLM: small models
// take larger rates; the decoders `llama`, `qwen`, `gemma`: LoRA r 16 / alpha 32 on every linear
// layer, presets.cc says why).
#pragma once

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace ftune {

// The names `preset:` accepts.
std::vector<std::string> preset_names();

// The defaults of preset `name` as a YAML tree of sections; InputError naming `where` when the
// preset does not exist.
YAML::Node preset_defaults(const std::string& name, const std::string& where);

// Copies into `dst` every key of `defaults` that `dst` does not have (recursively by section).
void fill_missing(YAML::Node dst, const YAML::Node& defaults);

}  // namespace ftune
