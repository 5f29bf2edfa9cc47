// What the 16-bit end-to-end run tests share: a bf16 / f16 run (LoRA, gradient checkpointing,
// f16 with its loss scaling) against the same run in fp32 — per-step losses within the DESIGN's
// bf16 tolerance (2e-2 relative, to the run's mean loss where a step's is smaller) but not equal,
// learning over the three epochs, and the arena it planned touched (>= 98 %: the planner counts
// the 16-bit buffers the run uses, and no more).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tiny_model.h"

namespace ftune::test {

// dir32 / dir16: the runs' directories (18 logged steps: 3 epochs of 6); s16: the 16-bit run's
// summary.json; the last epoch's losses sum to less than the first's by at least learn_margin.
inline void expect_16bit_run_follows_fp32(const std::string& dir32, const std::string& dir16,
                                          const nlohmann::json& s16, const std::string& precision,
                                          double learn_margin = 0) {
  SCOPED_TRACE(precision);
  EXPECT_EQ(s16["status"], "completed");
  EXPECT_EQ(s16["precision"], precision);
  const std::vector<double> a = logged_train_losses(dir32), b = logged_train_losses(dir16);
  ASSERT_EQ(a.size(), 18u);
  ASSERT_EQ(b.size(), a.size());
  // Relative to the step's loss, or to the run's mean loss where the step's is smaller: a late
  // loss near 0 (0.1 after 15 steps) is not held to 2% of itself. (ModernBERT's bf16 LoRA run,
  // whose frozen token embeddings are stored in bf16 too, drifts 2.1-2.6% of its steps 14, 15 and
  // 18, losses 0.31 / 0.10 / 0.21 of a run averaging 0.43: at most 1.8% of the mean.)
  double mean = 0;
  for (double x : a) mean += std::fabs(x) / a.size();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(b[i], a[i], 2e-2 * std::max(std::fabs(a[i]), mean)) << "step " << i + 1;
  EXPECT_NE(a, b);
  double first = 0, last = 0;  // it learns: the last epoch's losses sum to less than the first's
  for (int i = 0; i < 6; ++i) first += b[i], last += b[12 + i];
  EXPECT_LT(last, first - learn_margin);
  const nlohmann::json m = s16["memory"];
  EXPECT_LE(m["touched_bytes"].get<double>(), m["planned_bytes"].get<double>());
  EXPECT_GT(m["touched_bytes"].get<double>(), 0.98 * m["planned_bytes"].get<double>()) << m.dump(2);
}

// LoRA on every linear module with gradient checkpointing, trained in fp32, bf16 and fp16 (its loss
// scaling) into dir + "/" + precision; train(run, extra) runs `extra` appended to the training
// section (a peft section after it) and returns summary.json. Each 16-bit run follows the fp32 one.
inline void expect_lora_16bit_runs_follow_fp32(
    const std::string& dir,
    const std::function<nlohmann::json(const std::string&, const std::string&)>& train) {
  const std::string peft =
      "peft:\n  method: lora\n  r: 4\n  alpha: 8\n  dropout: 0.1\n  target_modules: all-linear\n";
  auto run = [&](const std::string& precision) {
    return train(precision, "  precision: " + precision + "\n  gradient_checkpointing: on\n" + peft);
  };
  run("fp32");
  for (const char* precision : {"bf16", "fp16"})
    expect_16bit_run_follows_fp32(dir + "/fp32", dir + "/" + precision, run(precision), precision);
}

}  // namespace ftune::test
