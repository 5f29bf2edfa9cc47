// The attention op's call (ops/attention.h) for a batch of tokens (models/backbone.h), as every
// family that runs the op on its own q, k, v makes it: the batch's rows (padded with the key
// mask, or packed varlen rows), dropout on the probabilities under its Philox site, the dropout
// streams' places and the workspace.
#pragma once

#include "models/backbone.h"
#include "ops/attention.h"

namespace ftune {

// p: the probabilities' dropout rate of this pass (0 in evaluation).
AttentionCall token_attention_call(const AttentionSpec& spec, const TokenInputs& in,
                                   const DropoutPlan& d, float p, uint32_t site,
                                   TensorView workspace);

}  // namespace ftune
