// The dropout plan of a packed batch as its layers use it (models/encoder.h, models/decoder.h).
#pragma once

#include "models/backbone.h"

namespace ftune {

// Packed batches: the plan with the micro-batch's step and first row read on the host (from its
// MicroParams, CPU memory), so that each row's attention takes its own place in the dropout
// streams; other plans unchanged.
DropoutPlan resolved_on_host(DropoutPlan d, const TokenInputs& in);

}  // namespace ftune
