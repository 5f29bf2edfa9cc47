// Names of trial states, as stored and printed.
#include "hpo/trial.h"

namespace ftune::hpo {

const char* to_string(TrialState s) {
  switch (s) {
    case TrialState::Waiting: return "WAITING";
    case TrialState::Running: return "RUNNING";
    case TrialState::Complete: return "COMPLETE";
    case TrialState::Pruned: return "PRUNED";
    case TrialState::Failed: return "FAIL";
  }
  return "?";
}

}  // namespace ftune::hpo
