// The dropout plan of a packed batch for a model that runs an op row by row
// (models/deberta/deberta_model.cc).
#pragma once

#include "models/backbone.h"

namespace ftune {

// Packed batches: the plan with the micro-batch's step and first row taken from the plan's own host
// fields instead of its MicroParams (micro cleared), so that an op called once per row can place
// row b at row0 + b (a kernel's resolve_micro would overwrite that row0 with the micro-batch's).
// Packed micro-batches run eagerly, never inside a captured CUDA graph (single_device_step.cc),
// so the host fields are the micro-batch's. Other plans unchanged.
DropoutPlan resolved_on_host(DropoutPlan d, const TokenInputs& in);

}  // namespace ftune
