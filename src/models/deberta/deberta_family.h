// The DeBERTa-v2/v3 family (model_type "deberta-v2": DeBERTa-v2, DeBERTa-v3, mDeBERTa) as an
// implementation of the backbone interface (models/backbone.h): DebertaV2ForSequenceClassification
// with HF's names (models/deberta/deberta_weights.h), its model over planned memory
// (models/deberta/deberta_model.h). Registered in the family registry (models/model_registry.cc).
#pragma once

#include <memory>

#include "models/backbone.h"
#include "models/deberta/deberta_config.h"

namespace ftune {

std::shared_ptr<const Backbone> make_deberta_backbone(DebertaConfig config);
// The module names a DeBERTa classifier may have (up to 128 layers, separate position
// projections): what peft.target_modules is checked against before a model is loaded.
std::vector<ClassifierModule> deberta_known_modules();

}  // namespace ftune
