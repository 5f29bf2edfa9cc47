// The checkpoints of a run: run/checkpoints/step-NNNNNNN/ directories, each a Hugging Face model
// directory (config.json, model.safetensors, tokenizer files) plus the trainer's resume state
// (trainer_state.json, optimizer.safetensors), and index.json naming them, the best and the last.
//
// Crash safety: a checkpoint is written into a hidden temporary directory, renamed into place
// (atomic), and only then entered in index.json (written atomically); retention deletes old
// directories only after the index no longer names them. A kill at any moment therefore leaves the
// index naming complete checkpoints only; leftovers of an interrupted save are removed on open,
// and a save that fails (a full disk) removes its temporary directory before the error goes on.
// Retention keeps the `keep_last` most recent checkpoints and never deletes the best.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ftune {

struct CheckpointEntry {
  int64_t step = 0;
  std::string dir;  // absolute path
};

class CheckpointStore {
 public:
  CheckpointStore(std::string run_dir, int64_t keep_last);

  // Saves the checkpoint of `step` (write(dir) fills a fresh directory) unless that step is
  // already saved; `best` marks it as the new best. Returns its directory.
  std::string save(int64_t step, bool best, const std::function<void(const std::string&)>& write);
  // Marks an existing checkpoint as the best (an evaluation after the save).
  void set_best(int64_t step);

  const std::vector<CheckpointEntry>& entries() const { return entries_; }
  std::optional<CheckpointEntry> last() const;
  std::optional<CheckpointEntry> best() const;
  std::optional<CheckpointEntry> find(int64_t step) const;
  std::string root() const { return root_; }

 private:
  void write_index() const;
  void apply_retention();

  std::string root_;
  int64_t keep_last_;
  std::vector<CheckpointEntry> entries_;  // by step
  int64_t best_step_ = -1;
};

// "step-0000123"
std::string checkpoint_dir_name(int64_t step);

}  // namespace ftune
