// Loading the golden fixtures written by tools/make_engine_fixtures.py (transformers + torch):
// a tiny HF model directory, a padded text-pair batch, and expected tensors.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "io/safetensors.h"
#include "models/batch.h"
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

}  // namespace ftune::test
