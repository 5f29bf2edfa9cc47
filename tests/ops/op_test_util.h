// Helpers for the per-op tests: finite-difference gradient checks and the device-parametrised
// fixture. Every op test body runs on each device present (CPU always; CUDA where a GPU exists)
// and compares against a plain reference computed on the host.
#pragma once

#include <functional>
#include <random>

#include "test_util.h"

namespace ftune::test {

class OpTest : public ::testing::TestWithParam<Device> {
 protected:
  Device device() const { return GetParam(); }
  std::mt19937_64 rng{test_seed()};
};

#define FTUNE_INSTANTIATE_DEVICES(suite)                                                          \
  INSTANTIATE_TEST_SUITE_P(Devices, suite, ::testing::ValuesIn(::ftune::test::devices_present()), \
                           ::ftune::test::device_param_name)

// Central finite differences of a scalar loss with respect to the host values x[0..n): checks up
// to max_checks evenly spread elements against the analytic gradient. The loss is evaluated in
// double from f32 outputs, so step h ~ 1e-2 keeps rounding noise below ~1e-4.
inline void expect_gradient(const std::function<double()>& loss, float* x, int64_t n,
                            const std::vector<float>& analytic, double tol, const char* what,
                            float h = 1e-2f, int max_checks = 48) {
  ASSERT_EQ(static_cast<int64_t>(analytic.size()), n) << what;
  double scale = 1e-3;
  for (float g : analytic) scale = std::max(scale, std::fabs(double(g)));
  const int64_t stride = std::max<int64_t>(1, n / max_checks);
  for (int64_t i = 0; i < n; i += stride) {
    const float keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    const double numeric = (up - down) / (2.0 * h);
    EXPECT_NEAR(numeric, analytic[i], tol * scale) << what << " element " << i;
  }
}

// sum_i out_i * r_i in double: the scalar whose gradient with respect to out is r.
inline double weighted_sum(const std::vector<float>& out, const std::vector<float>& r) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += double(out[i]) * double(r[i]);
  return s;
}

// Every element of `got` within tol * max|want| of the reference `want` (float or double);
// `floor` is the smallest scale (a reference of exact zeros: the scale of what it comes with).
template <typename Got, typename Want>
void expect_close(const std::vector<Got>& got, const std::vector<Want>& want, double tol,
                  const char* what, double floor = 1e-6) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = floor;
  for (Want v : want) scale = std::max(scale, std::fabs(double(v)));
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(double(got[i]), double(want[i]), tol * scale) << what << "[" << i << "]";
}

inline std::vector<float> random_values(int64_t n, std::mt19937_64& rng, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace ftune::test
