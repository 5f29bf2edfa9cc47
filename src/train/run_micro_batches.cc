// Walking a run's micro-batches before it starts (see run_micro_batches.h).
#include "train/run_micro_batches.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "data/batcher.h"
#include "data/token_batch.h"
#include "dist/gradient_reducer.h"
#include "train/group_sampler.h"

namespace ftune {

nlohmann::json MicroBatchShape::to_json() const {
  nlohmann::json j = {{"split", split}, {"rows", rows}, {"tokens", tokens}, {"longest", longest}};
  if (split == "train") {
    j["epoch"] = epoch;
    j["step"] = step;
    j["micro_batch"] = index;
  } else {
    j["batch"] = index;
  }
  return j;
}

std::string MicroBatchShape::describe() const {
  const std::string where =
      split == "train" ? fmt::format("train epoch {}, step {}, micro-batch {}", epoch, step, index)
                       : fmt::format("{} batch {}", split, index);
  return fmt::format("{}: {} rows, {} tokens, longest {}", where, rows, tokens, longest);
}

RunMicroBatches::RunMicroBatches(const TrainConfig& cfg, const TrainData& data, int64_t ranks,
                                 PadRule pad, int64_t max_seq)
    : data_(&data), ranks_(std::max<int64_t>(1, ranks)), pad_(pad), max_seq_(max_seq) {
  const auto& tc = cfg.training;
  const auto& examples = data.train.examples;
  // The trainer's batch order (train/trainer.cc plan_schedule): the length-bucketed batcher over
  // the effective batch, or listwise the group sampler's steps of whole groups.
  std::optional<data::LengthBucketedBatcher> batcher;
  std::optional<GroupSampler> sampler;
  if (data.task.grouped()) {
    group_size_ = cfg.data.group_size;
    sampler.emplace(&examples, group_size_, cfg.effective_batch(), tc.seed);
    steps_per_epoch_ = std::max<int64_t>(1, sampler->batches_per_epoch());
  } else {
    batcher.emplace(&examples, cfg.effective_batch(), tc.seed);
    steps_per_epoch_ = std::max<int64_t>(1, batcher->batches_per_epoch());
  }
  const int64_t steps = tc.max_steps > 0 ? tc.max_steps : tc.epochs * steps_per_epoch_;
  step_begin_.push_back(0);
  for (int64_t e = 0; static_cast<int64_t>(step_begin_.size()) - 1 < steps; ++e) {
    const std::vector<std::vector<int64_t>> epoch = sampler ? sampler->epoch(e) : batcher->epoch(e);
    if (epoch.empty()) break;
    for (const std::vector<int64_t>& batch : epoch) {
      if (static_cast<int64_t>(step_begin_.size()) - 1 == steps) break;
      for (const int64_t i : batch)
        lengths_.push_back(static_cast<int32_t>(examples[i].input_ids.size()));
      step_begin_.push_back(static_cast<int64_t>(lengths_.size()));
    }
  }
}

void RunMicroBatches::add(const MicroBatchShape& m, RunShape& out) const {
  out.rows = std::max(out.rows, m.rows);
  out.longest = std::max(out.longest, m.longest);
  out.token_positions = std::max(out.token_positions, m.tokens * m.longest);
  if (m.tokens > out.tokens) {
    out.tokens = m.tokens;
    out.largest = m;
  }
}

void RunMicroBatches::walk_train(const RunCut& cut, RunShape& out) const {
  const BatchLayout layout = cut.tokens > 0 ? BatchLayout::Packed : BatchLayout::Padded;
  std::vector<int64_t> step_lengths;
  for (int64_t s = 0; s < steps(); ++s) {
    step_lengths.assign(lengths_.begin() + step_begin_[s], lengths_.begin() + step_begin_[s + 1]);
    const auto n = static_cast<int64_t>(step_lengths.size());
    for (int64_t rank = 0; rank < ranks_; ++rank) {
      const auto [begin, end] = rank_rows(n, static_cast<int>(rank), static_cast<int>(ranks_),
                                          group_size_);  // whole groups
      const auto cuts =
          micro_batch_cuts(step_lengths, layout, cut.rows, cut.tokens, begin, end, group_size_);
      for (size_t k = 0; k < cuts.size(); ++k) {
        const auto [row0, rows] = cuts[k];
        MicroBatchShape m{
            rows, 0, 0, "train", s / steps_per_epoch_ + 1, s + 1, static_cast<int64_t>(k) + 1};
        int64_t real = 0, longest = 1;
        for (int64_t r = row0; r < row0 + rows; ++r) {
          real += step_lengths[r];
          longest = std::max(longest, step_lengths[r]);
        }
        // Padded: the micro-batch's longest row by the run's padding rule (train/input_staging.h).
        m.longest = layout == BatchLayout::Packed ? longest : pad_.length(longest, max_seq_);
        m.tokens = layout == BatchLayout::Packed ? real : rows * m.longest;
        add(m, out);
      }
    }
  }
}

void RunMicroBatches::walk_eval(const RunCut& cut, RunShape& out) const {
  // train/evaluate.cc: length-sorted batches of at most eval_rows rows (packed: and eval_tokens
  // tokens), each padded to its own longest row by the same rule as a micro-batch.
  for (const std::optional<TokenizedSplit>* split : {&data_->validation, &data_->test}) {
    if (!split->has_value()) continue;
    const auto& examples = (*split)->examples;
    const auto batches = data::length_sorted_batches(examples, cut.eval_rows, cut.eval_tokens);
    for (size_t k = 0; k < batches.size(); ++k) {
      MicroBatchShape m{static_cast<int64_t>(batches[k].size()),
                        0,
                        0,
                        (*split)->name,
                        0,
                        0,
                        static_cast<int64_t>(k) + 1};
      int64_t real = 0, longest = 1;
      for (const int64_t i : batches[k]) {
        const auto len = static_cast<int64_t>(examples[i].input_ids.size());
        real += len;
        longest = std::max(longest, len);
      }
      m.longest = cut.eval_tokens > 0 ? longest : pad_.length(longest, max_seq_);
      m.tokens = cut.eval_tokens > 0 ? real : m.rows * m.longest;
      add(m, out);
    }
  }
}

RunShape RunMicroBatches::shape(const RunCut& cut) const {
  FTUNE_ASSERT(cut.rows >= 1 && cut.eval_rows >= 1,
               "a run cut into micro-batches of {} rows, "
               "evaluation batches of {}",
               cut.rows, cut.eval_rows);
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto it = cache_.find(cut); it != cache_.end()) return it->second;
  RunShape out;
  walk_train(cut, out);
  walk_eval(cut, out);
  return cache_[cut] = out;
}

}  // namespace ftune
