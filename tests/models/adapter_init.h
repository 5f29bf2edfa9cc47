// Test helper: non-zero LoRA B matrices (PEFT initialises B to zero), so that every adapter
// gradient of a test model is non-trivial.
#pragma once

#include <random>

#include "models/sequence_classifier.h"
#include "test_util.h"

namespace ftune::test {

inline void randomize_lora_b(SequenceClassifier& clf) {
  for (const ParamSpec& s : clf.adapter_params().specs())
    if (s.name.ends_with("lora_B.weight")) {
      std::mt19937_64 rng(11);
      const HostTensor v = random_tensor(s.shape, rng, -0.3f, 0.3f);
      copy(clf.param(s.name), v.view());
    }
}

}  // namespace ftune::test
