// Helpers shared by all tests: random inputs, poisoned outputs, error measures, the list of
// devices present (CPU always, CUDA when built and a GPU exists), fixture paths.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/memory.h"
#include "core/tensor.h"

namespace ftune::test {

// A fresh seed per run (printed on failure through SCOPED_TRACE in the tests that use it), unless
// FTUNE_TEST_SEED is set to reproduce one.
uint64_t test_seed();

HostTensor random_tensor(Shape shape, std::mt19937_64& rng, float lo = -1.0f, float hi = 1.0f);
HostTensor poisoned_tensor(Shape shape);  // every element NaN: an unwritten output fails
HostTensor tensor_from(const std::vector<float>& values, Shape shape);
std::vector<float> to_vector(TensorView v);  // any device, f32

// max_i |a_i - b_i| / max(max_i |b_i|, floor): one number per tensor, scale-aware.
double max_rel_error(TensorView a, TensorView b, double floor = 1e-6);
// The same, per element: max_i |a_i - b_i| / max(|b_i|, floor).
double max_elementwise_rel_error(TensorView a, TensorView b, double floor);

std::vector<Device> devices_present();
std::string fixtures_dir();  // tests/fixtures in the source tree
std::string source_dir();
std::string ftune_binary();  // path of the built `ftune` executable

// A temporary directory removed when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ftune::test
