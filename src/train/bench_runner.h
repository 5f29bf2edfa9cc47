// `ftune bench`: what each of ftune's optimisations buys on this machine, this model and these
// data. The configured training runs for a few timed optimizer steps once with ftune's defaults
// and once per switch (train/bench_switches.h) flipped, each `repeats` times, interleaved (default,
// variants, default, variants, ...) so that drift in the machine's load touches every variant
// alike.
//
// Everything runs in this process over one tokenized data set and one model spec: each run plans
// its memory, builds its step strategy (train/single_device_step.h, the trainer's own) and copies
// in the same initial weights (loaded once; adapters initialised from the seed), then trains on
// the same step batches of the real data's length mix — the first `steps` batches of the
// length-bucketed batcher, assembled by a prefetch thread as in training. Warm-up steps cycle
// through those batches first (on a GPU twice, so every micro-batch shape has been captured as a
// CUDA graph and its cuDNN plans built before the clock starts); the setup (plan, arena, weights)
// and the warm-up are timed apart from the timed steps. The timed window starts and ends with the
// host's read of the device's step scalars, which waits for the device.
//
// Each run reports what it really ran with (its settings and the step strategy's own report, as
// summary.json does), samples/s, real tokens/s, MFU where the GPU's peak is known, planned and
// measured memory (the CPU: arena bytes touched; a GPU: device memory taken), micro-batch x
// accumulation, and the mean training loss over the timed steps, whose relative difference from
// the default's in the same repeat is the price of a switch that changes numerics. Nothing is
// written: no run directory, no checkpoint (a GPU run's GEMM autotune cache is updated as by any
// ftune process).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ftune {

struct BenchOptions {
  std::string config;                  // the YAML file
  std::vector<std::string> overrides;  // section.key=value, as `ftune train` takes them
  std::vector<std::string> only;       // switch names; empty: every switch
  int64_t steps = 10;                  // timed optimizer steps per run
  int64_t warmup = -1;                 // untimed steps before them; -1: 2 x steps on a GPU, 1 on the CPU
  int64_t repeats = 2;                 // runs of each variant
};

// Runs the benchmark; the report (see bench_runner.cc for its fields). Throws InputError for a
// bad configuration, a bad --only name or a default run that cannot run; a variant that cannot
// run is reported with the reason.
nlohmann::json run_bench(const BenchOptions& options);

}  // namespace ftune
