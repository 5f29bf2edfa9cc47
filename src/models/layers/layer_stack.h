// The layer stack's backward: what every family's backward does over its layers, written once.
// From the top layer down: with gradient checkpointing, a layer's activations are recomputed
// first from its kept input (all layers share one activation slot, which holds the top layer's
// after forward, so the top layer needs none; Philox keyed dropout makes the recomputation
// bit-identical); then the layer's backward; then layer_gradients_final(l) (gradient_ready.h), so
// data-parallel runs reduce a layer's gradients while the layers below it run backward.
#pragma once

#include <cstdint>

#include "models/gradient_ready.h"

namespace ftune {

// recompute(l): layer l's forward again into the shared slot; backward(l): layer l's backward.
template <typename Recompute, typename Backward>
void layer_stack_backward(int64_t num_layers, bool checkpointing, Recompute&& recompute,
                          Backward&& backward) {
  for (int64_t l = num_layers - 1; l >= 0; --l) {
    if (checkpointing && l != num_layers - 1) recompute(l);
    backward(l);
    layer_gradients_final(l);  // data-parallel runs start reducing them (gradient_ready.h)
  }
}

}  // namespace ftune
