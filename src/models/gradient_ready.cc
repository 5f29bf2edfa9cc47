// Where a backward pass has got to (see gradient_ready.h).
#include "models/gradient_ready.h"

namespace ftune {
namespace {
thread_local GradientReadyListener* listener = nullptr;
}  // namespace

void set_gradient_listener(GradientReadyListener* l) { listener = l; }

void layer_gradients_final(int64_t layer) {
  if (listener) listener->layer_done(layer);
}

}  // namespace ftune
