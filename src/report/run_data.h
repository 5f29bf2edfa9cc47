// What a run directory holds, read for the run views (`ftune report RUN_DIR`, the dashboard):
// metrics.jsonl (one line per log interval: step, epoch, loss, lr, grad_norm, samples_per_s,
// tokens_per_s; one per evaluation: split, step and the metrics), summary.json (written when the
// run ends: throughput, input wait, memory plan and use by category, NVML statistics on a GPU)
// and config.yaml (the resolved configuration). Read-only; a run still in progress has no
// summary yet and may have a half-written last line, which is left for the next read.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ftune::report {

struct RunData {
  std::string dir;
  std::vector<nlohmann::json> train;  // metrics.jsonl lines with split "train", in file order
  std::vector<nlohmann::json> evals;  // lines of the other splits (validation, test)
  nlohmann::json summary;             // null while the run has not written summary.json
  std::string config_yaml;            // empty when config.yaml is missing
  std::vector<std::string> missing;   // files not found, e.g. "summary.json (the run has not ended)"
};

// Reads `dir`. InputError when it is not a directory, holds neither metrics.jsonl nor
// summary.json, or a file is malformed (naming the file and line).
RunData read_run_dir(const std::string& dir);

}  // namespace ftune::report
