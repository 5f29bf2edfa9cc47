// A BERT-family model directory read as the family's own EncoderConfig rather than a ModelSpec
// (models/hf_checkpoint.h's load_model_spec): for the BERT family's tests, which build and inspect
// its config directly.
#pragma once

#include <string>

#include "models/bert/encoder_config.h"
#include "models/hf_checkpoint.h"

namespace ftune {

// Reads DIR/config.json as BERT, RoBERTa or XLM-R and applies the label overrides of `options`.
EncoderConfig load_model_config(const std::string& dir, const LoadOptions& options = {});

}  // namespace ftune
