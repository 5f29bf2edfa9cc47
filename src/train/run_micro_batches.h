// The micro-batches of a whole run, known before the first step: every split is tokenized before
// planning and the batch order is deterministic per seed and epoch (data/batcher.h,
// train/group_sampler.h), so the memory plan walks the run as the trainer will — each epoch's step
// batches cut into micro-batches (padded or packed, listwise groups whole; a data-parallel rank's
// share), and the evaluation batches of validation and test — and plans the arena for the largest
// of them instead of rows x data.max_length (train/memory_planner.h).
//
// "Largest" is per dimension: the most rows, the most tokens (packed: real tokens; padded: rows x
// padded length), the longest row and the most tokens x longest row of any micro-batch, each a
// buffer's size driver (the head's buffers follow rows, the activations tokens, the kernels'
// scratch the longest row, the saved attention probabilities tokens x the micro-batch's longest
// row), so every buffer is planned for exactly what its largest use needs. On length-sorted
// batches they mostly come from one micro-batch: `largest` names the one with the most tokens.
//
// How a run is cut depends on the micro-batch being planned (its rows and, packed, its token
// budget), so shape() takes the cut; an `auto` batch size plans each candidate for the largest
// micro-batch that candidate would produce, which keeps the search exact (the answer fits, one
// more row would not). The walk stores each step batch's row lengths (4 bytes a row and epoch)
// and caches shapes per cut.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "train/input_staging.h"
#include "train/train_config.h"
#include "train/train_data.h"

namespace ftune {

// One micro-batch of the run: its size and where it is.
struct MicroBatchShape {
  int64_t rows = 0;
  int64_t tokens = 0;   // packed: real tokens; padded: rows x padded length
  int64_t longest = 0;  // the longest row (padded: the padded length)
  std::string split;    // "train", "validation" or "test"
  int64_t epoch = 0;    // train: 1-based epoch
  int64_t step = 0;     // train: 1-based optimizer step of the run
  int64_t index = 0;    // 1-based: the micro-batch in its step, or the evaluation batch

  nlohmann::json to_json() const;
  // "train epoch 2, step 9, micro-batch 1: 32 rows, 871 tokens, longest 48"
  std::string describe() const;
};

// The largest micro-batch of a run, per dimension (see above).
struct RunShape {
  int64_t rows = 0, tokens = 0, longest = 0;
  int64_t token_positions = 0;  // tokens x longest row (the saved attention probabilities)
  MicroBatchShape largest;  // the micro-batch with the most tokens (the first of them)
};

// How the run is cut: the step's micro-batches and the evaluation batches.
struct RunCut {
  int64_t rows = 0;         // rows of a training micro-batch at most
  int64_t tokens = 0;       // packed: its token budget; 0: padded micro-batches
  int64_t eval_rows = 0;    // rows of an evaluation batch at most
  int64_t eval_tokens = 0;  // packed: an evaluation batch's token budget
  bool operator<(const RunCut& o) const {
    return std::tie(rows, tokens, eval_rows, eval_tokens) <
           std::tie(o.rows, o.tokens, o.eval_rows, o.eval_tokens);
  }
};

class RunMicroBatches {
 public:
  // The run of `config` over `data`: training.epochs (or max_steps) of step batches of the
  // effective batch (listwise: groups of data.group_size rows), `ranks` data-parallel ranks each
  // cutting its share, padded micro-batches padded by `pad` up to `max_seq`.
  RunMicroBatches(const TrainConfig& config, const TrainData& data, int64_t ranks, PadRule pad,
                  int64_t max_seq);

  RunShape shape(const RunCut& cut) const;
  int64_t steps() const { return static_cast<int64_t>(step_begin_.size()) - 1; }

 private:
  void walk_train(const RunCut& cut, RunShape& out) const;
  void walk_eval(const RunCut& cut, RunShape& out) const;
  void add(const MicroBatchShape& m, RunShape& out) const;

  const TrainData* data_;
  std::vector<int32_t> lengths_;     // every step batch's row lengths, in training order
  std::vector<int64_t> step_begin_;  // step s is lengths_[step_begin_[s], step_begin_[s + 1])
  int64_t steps_per_epoch_ = 1;
  int64_t group_size_ = 1;
  int64_t ranks_ = 1;
  PadRule pad_;
  int64_t max_seq_ = 0;
  mutable std::mutex mutex_;
  mutable std::map<RunCut, RunShape> cache_;
};

}  // namespace ftune
