// Where a run's numbers go as they happen: metrics.jsonl (one JSON object per line, flushed at
// once, so a killed run keeps everything logged so far), the TensorBoard event file, and the
// console (progress bar on a terminal, plain log lines otherwise).
#pragma once

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace ftune {

class RunLog {
 public:
  // A resumed run keeps the lines of metrics.jsonl up to `resume_step` and drops the rest (they
  // will be logged again, identically).
  RunLog(const std::string& run_dir, std::optional<int64_t> resume_step, bool tensorboard);
  ~RunLog();

  // One line of metrics.jsonl ({"split": ..., "step": ..., ...}); numeric fields also go to
  // TensorBoard as "<split>/<field>".
  void write(const nlohmann::json& line);

 private:
  struct TensorBoard;
  std::string path_;
  std::ofstream out_;
  std::unique_ptr<TensorBoard> tb_;
};

}  // namespace ftune
