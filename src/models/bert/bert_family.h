// The BERT family (BERT, RoBERTa, XLM-R and what shares their architecture: MiniLM, BGE rerankers)
// as an implementation of the backbone interface (models/backbone.h): the encoder of
// models/bert/encoder.h and the HF classification heads of models/bert/classification_head.h over
// an
// EncoderConfig. Nothing outside models/ sees the EncoderConfig: they hold a ModelSpec.
#pragma once

#include <memory>

#include "models/backbone.h"
#include "models/bert/encoder_config.h"

namespace ftune {

std::shared_ptr<const Backbone> make_bert_backbone(EncoderConfig config);

}  // namespace ftune
