// The data-parallel gradient sync (see gradient_sync.h).
#include "train/gradient_sync.h"

#include <exception>

#include "core/error.h"

namespace ftune {

void RankGradientSync::run(const std::function<void()>& passes, double* step_loss,
                           bool can_halve) {
  // A failure of this rank's passes still starts every bucket, and the ranks agree on the step:
  // all fall back to a smaller micro-batch (OutOfMemoryError on every rank), or all stop naming
  // the rank (dist/gradient_reducer.h).
  RankFailure failure;
  try {
    passes();
  } catch (const OutOfMemoryError& e) {
    failure = {RankFailure::kOutOfMemory, e.what()};
  } catch (const std::exception& e) {
    failure = {RankFailure::kError, e.what()};
  }
  reducer_.finish(step_loss, failure, can_halve);
}

}  // namespace ftune
