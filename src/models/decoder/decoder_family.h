// The decoder family (Llama, Mistral, Qwen2/2.5, Qwen3) as an implementation of the backbone interface
// (models/backbone.h): models/decoder/decoder.h's stack over a DecoderConfig, HF's
// *ForSequenceClassification pooling (the last non-pad token) and score head (no bias).
#pragma once

#include <memory>

#include "models/backbone.h"
#include "models/decoder/decoder_config.h"

namespace ftune {

std::shared_ptr<const Backbone> make_decoder_backbone(DecoderConfig config);

}  // namespace ftune
