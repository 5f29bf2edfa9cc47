// Where a backward pass has got to, for data-parallel runs that reduce gradients while backward
// goes on (issue 20: dist/gradient_reducer.h). A family's backward goes from the head down
// through the layers to the embeddings; after layer l's backward it calls
// layer_gradients_final(l): the gradients of layer l's parameters, and of every parameter above it
// (later layers, final norm, pooler, head), are final for this pass. The listener is per thread
// and set only around the backward whose gradients are the step's last; without one the call
// does nothing. A family that never calls it is still correct: its gradients are reduced after
// its backward, without the overlap.
#pragma once

#include <cstdint>

namespace ftune {

class GradientReadyListener {
 public:
  virtual ~GradientReadyListener() = default;
  virtual void layer_done(int64_t layer) = 0;
};

// The listener of this thread's backward passes until reset (nullptr: none).
void set_gradient_listener(GradientReadyListener* listener);
void layer_gradients_final(int64_t layer);

}  // namespace ftune
