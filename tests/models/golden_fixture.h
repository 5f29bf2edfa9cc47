// Loading the golden fixtures written by tools/make_engine_fixtures.py (transformers + torch):
// a tiny HF model directory, a padded text-pair batch, and expected tensors.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "io/safetensors.h"
#include "models/batch.h"
#include "optim/adamw.h"
#include "test_util.h"

namespace ftune::test {

struct GoldenCase {
  std::string dir;        // tests/fixtures/engine/<name>
  std::string model_dir;  // <dir>/model
  nlohmann::json meta;    // case.json
  Batch batch;
  io::SafetensorsFile expected;

  static GoldenCase load(const std::string& name);
  // Expected tensor `name` as f32 host memory.
  HostTensor tensor(const std::string& name) const;
};

// A parameter after a few Adam steps against the reference: max|got - want| / max|want| over the
// elements whose first gradient g0 is 0 (decay alone moves them) or at least 1e-5 of the tensor's
// largest. Adam moves an element
// by about lr whatever its gradient's size, so one whose first gradient is fp32-noise-sized (e.g.
// 1.9e-7 next to 0.27, where two correct fp32 sums differ by 30%) lands anywhere within a few lr:
// those are only held to |got - want| <= noise_bound (expectations added here, naming `what`).
struct AdamComparison {
  double rel_error = 0;
  int noise_elements = 0;
};
// The AdamW settings a fixture's reference ran with: meta's {"lr", "betas", "eps", "weight_decay"}
// (case.json's "optimizer" of every fixture script).
AdamWOptions fixture_adamw(const nlohmann::json& optimizer);

AdamComparison compare_after_adam(TensorView got, TensorView want, TensorView g0, double noise_bound,
                                  const std::string& what);

}  // namespace ftune::test
