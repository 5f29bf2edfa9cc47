// The ModernBERT family as an implementation of the backbone interface (models/backbone.h):
// models/modernbert/modernbert.h's stack, pooling and head over a ModernBertConfig. Packed batches
// by default
// (ModernBERT was designed for unpadded training).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/backbone.h"
#include "models/modernbert/modernbert_config.h"

namespace ftune {

std::shared_ptr<const Backbone> make_modernbert_backbone(ModernBertConfig config);
// The module tree PEFT names resolve on, for the registry's list of known module names (128
// layers).
std::vector<ClassifierModule> modernbert_known_modules();

}  // namespace ftune
