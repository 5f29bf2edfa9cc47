// Two training runs that should have followed the same trajectory (micro-batching, packing, ranks
// of a data-parallel run vs one process): their per-step losses and final weights compared, with
// the largest differences printed so a test log shows how close they came.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "run_files.h"

namespace ftune::test {

struct TrajectoryTolerance {
  size_t steps = 0;            // logged train steps each run must have
  double loss = 1e-6;          // per-step loss, relative
  double weight = 1e-5;        // per tensor: largest difference / largest magnitude
  std::string weights_file = "/model/model.safetensors";  // within each run directory
  // Further tensors left out, by a part of their name: those whose exact gradient is zero for the
  // run's loss (a group loss's score bias: softmax and margins are shift-invariant), which move
  // only by rounding noise that Adam's normalisation turns into steps of +-lr.
  std::vector<std::string> zero_gradient;
};

// Per-step losses of run directories a and b within tol.loss relative, every weight within
// tol.weight of its tensor's largest value. The attention key bias is left out: it adds q . b_k to
// every score of a query row, which the softmax cancels, so its exact gradient is zero and what it
// gets is rounding noise of the summation order, which Adam's normalisation turns into steps of
// +-lr; it changes no output (the losses are computed through it).
inline void expect_same_trajectory(const std::string& a, const std::string& b,
                                   const TrajectoryTolerance& tol) {
  SCOPED_TRACE(a + " vs " + b);
  const auto la = step_losses(a), lb = step_losses(b);
  ASSERT_EQ(la.size(), tol.steps);
  ASSERT_EQ(lb.size(), la.size());
  double loss_rel = 0, weight_rel = 0;
  for (const auto& [step, loss] : la) {
    ASSERT_TRUE(lb.count(step)) << step;
    const double rel = std::fabs(lb.at(step) - loss) / std::fabs(loss);
    EXPECT_LT(rel, tol.loss) << "step " << step << ": " << loss << " vs " << lb.at(step);
    loss_rel = std::max(loss_rel, rel);
  }
  const auto wa = tensor_values(a + tol.weights_file), wb = tensor_values(b + tol.weights_file);
  ASSERT_EQ(wa.size(), wb.size());
  for (const auto& [name, va] : wa) {
    if (name.find("attention.self.key.bias") != std::string::npos) continue;
    if (std::any_of(tol.zero_gradient.begin(), tol.zero_gradient.end(),
                    [&](const std::string& part) { return name.find(part) != std::string::npos; }))
      continue;
    ASSERT_TRUE(wb.count(name)) << name;
    const auto& vb = wb.at(name);
    ASSERT_EQ(va.size(), vb.size()) << name;
    double scale = 1e-12, diff = 0;
    for (size_t i = 0; i < va.size(); ++i) {
      scale = std::max(scale, double(std::fabs(va[i])));
      diff = std::max(diff, double(std::fabs(va[i] - vb[i])));
    }
    EXPECT_LT(diff / scale, tol.weight) << name;
    weight_rel = std::max(weight_rel, diff / scale);
  }
  std::printf("%s vs %s: max step-loss difference %.3g relative, max weight difference %.3g\n",
              a.c_str(), b.c_str(), loss_rel, weight_rel);
}

}  // namespace ftune::test
