// What the mixed-precision model tests share: two accumulated training micro-steps with different
// dropout masks, and the relative difference of two value lists.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/memory.h"
#include "models/sequence_classifier.h"

namespace ftune::test {

// Two accumulated micro-steps (dropout keys 77 / micro 0 and 1, loss scale 0.5); their losses.
inline std::vector<float> two_micro_steps(SequenceClassifier& clf) {
  std::vector<float> losses;
  for (uint32_t micro = 0; micro < 2; ++micro) {
    const DropoutPlan d{true, 77, micro};
    clf.forward(d);
    losses.push_back(to_vector(clf.loss({}))[0]);
    clf.backward(d, 0.5f);
  }
  return losses;
}

// max |a - b| / max |b|.
inline double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, ref = 1e-12;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    ref = std::max(ref, std::fabs(double(b[i])));
  }
  return diff / ref;
}

}  // namespace ftune::test
