// The decoder family (Llama, Mistral, Qwen2/2.5, Qwen3) as an implementation of the backbone interface
// (models/backbone.h): models/decoder/decoder.h's stack over a DecoderConfig, HF's
// *ForSequenceClassification pooling (the last non-pad token) and score head (no bias).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/backbone.h"
#include "models/decoder/decoder_config.h"

namespace ftune {

std::shared_ptr<const Backbone> make_decoder_backbone(DecoderConfig config);
// The module tree PEFT names resolve on, for the registry's list of known module names: every
// decoder variant's modules (q / k norms and sandwich norms included) under `prefix` ("model.", or
// Gemma 3's multimodal "model.language_model."), for 128 layers.
std::vector<ClassifierModule> decoder_known_modules(const std::string& prefix);

}  // namespace ftune
