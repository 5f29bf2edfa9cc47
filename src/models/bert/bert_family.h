// The BERT family (BERT, RoBERTa, XLM-R and what shares their architecture: MiniLM, BGE rerankers)
// as an implementation of the backbone interface (models/backbone.h): the encoder of
// models/bert/encoder.h and the HF classification heads of models/bert/classification_head.h over
// an EncoderConfig. Nothing outside models/bert/ and the family registry sees the EncoderConfig:
// they hold a ModelSpec.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "models/backbone.h"
#include "models/bert/encoder_config.h"

namespace ftune {

std::shared_ptr<const Backbone> make_bert_backbone(EncoderConfig config);

// named_modules() of BertForSequenceClassification (`bert`: with its pooler) or of
// RobertaForSequenceClassification / XLMRobertaForSequenceClassification, with `layers` layers:
// the tree PEFT's target_modules resolve on (models/adapter_config.h).
std::vector<ClassifierModule> bert_classifier_modules(bool bert, int64_t layers);

}  // namespace ftune
