// The switches `ftune bench` measures (train/bench_runner.h): every configuration key that turns
// one of ftune's optimisations on or off — precision, TF32, the attention kernel, CUDA graphs,
// packing, length-bucket padding, gradient checkpointing, the planner's micro-batch, prefetch
// depth and the CPU's compute threads. Each switch reads its setting from what a run really
// resolved (RunSettings: the plan and the step strategy's report, not the YAML), and flips it:
// off where the default turned it on, on where the default left it off. The variant's own run
// then says whether the flip took effect; a flip the device refuses (cuda_graphs on on a CPU) is
// the refusal's message, one that resolves back to the default (tf32 on a CPU) is listed as such.
//
// ftune has one optimizer, the fused multi-tensor AdamW (one pass on every device): there is no
// unfused one to compare it with, so it is not a switch.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/train_config.h"

namespace ftune {

// What one switch's flip is: the overrides that make the variant, and how the table names the
// variant's setting; or, with `skip` set, why there is nothing to flip on this run.
struct SwitchFlip {
  std::vector<std::string> overrides;  // "training.precision=bf16", applied after the user's
  std::string setting;                 // "bf16"
  std::string skip;                    // non-empty: not run, for this reason
};

struct BenchSwitch {
  std::string name;  // the --only name, and the key of the run's settings ("precision")
  std::string what;  // one line for the table's legend
  // The flip, from the run's configuration and the default run's settings (RunSettings).
  std::function<SwitchFlip(const TrainConfig& config, const nlohmann::json& settings)> flip;
};

// Every switch, in the table's order.
const std::vector<BenchSwitch>& bench_switches();

// The switches --only names ("precision,packing"); all of them for an empty list. InputError
// naming the bad name and listing the valid ones.
std::vector<const BenchSwitch*> select_switches(const std::vector<std::string>& only);

}  // namespace ftune
