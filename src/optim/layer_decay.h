// Layer-wise learning-rate decay (LLRD, as in ELECTRA / BEiT fine-tuning): with L encoder layers,
// the head and pooler train at the full rate, layer l (0-based) at decay^(L - l) and the
// embeddings at decay^(L + 1), so the layers nearest the input, which hold the most general
// features, move least.
#pragma once

#include <cstdint>

#include "models/param_table.h"
#include "optim/adamw.h"

namespace ftune {

// The LR multiplier of parameter `name` (an HF name) in a model of `num_layers` layers.
double layer_decay_scale(const std::string& name, int64_t num_layers, double decay);

// Sets every parameter's multiplier on the optimizer; decay 1 leaves all at 1.
void apply_layer_decay(AdamW& optimizer, const ParamTable& params, int64_t num_layers,
                       double decay);

}  // namespace ftune
