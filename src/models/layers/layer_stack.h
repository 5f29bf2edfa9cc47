// The layer stack: what every family does over its layers, written once. Its activation slots
// (LayerSlots): with gradient checkpointing all layers share one slot (only each layer's output is
// kept besides), training without it keeps one per layer, inference alternates two. Its backward
// (layer_stack_backward), from the top layer down: with gradient checkpointing, a layer's activations are recomputed
// first from its kept input (all layers share one activation slot, which holds the top layer's
// after forward, so the top layer needs none; Philox keyed dropout makes the recomputation
// bit-identical); then the layer's backward; then layer_gradients_final(l) (gradient_ready.h), so
// data-parallel runs reduce a layer's gradients while the layers below it run backward.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer_table.h"
#include "models/gradient_ready.h"

namespace ftune {

// The activation slots of a stack of `layers`: layer l uses slot l % count().
class LayerSlots {
 public:
  LayerSlots(int64_t layers, bool training, bool checkpointing)
      : layers_(layers),
        count_(checkpointing ? 1 : training ? layers : std::min<int64_t>(2, layers)) {}
  int64_t count() const { return count_; }
  // f(l) for each layer l of slot s.
  template <typename F>
  void each(int64_t s, F&& f) const {
    for (int64_t l = s; l < layers_; l += count_) f(l);
  }
  // Plans buffer `name` of slot s and binds it as `view` of each of the slot's layers (acts[l]).
  template <typename Acts>
  void add(BufferTable& t, std::vector<Acts>& acts, int64_t s, const std::string& name,
           DType dtype, Shape shape, TensorView Acts::*view) const {
    t.add(name, dtype, std::move(shape));
    each(s, [&](int64_t l) { t.also(name, &(acts[l].*view)); });
  }

 private:
  int64_t layers_ = 0, count_ = 1;
};

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
