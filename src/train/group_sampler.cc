// Listwise step batches: groups of 1 positive + group_size - 1 negatives (see group_sampler.h).
#include "train/group_sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <random>

#include "core/error.h"

namespace ftune {

GroupSampler::GroupSampler(const std::vector<data::TokenizedExample>* examples, int64_t group_size,
                           int64_t groups_per_step, uint64_t seed)
    : examples_(examples), group_size_(group_size), groups_per_step_(groups_per_step), seed_(seed) {
  if (group_size < 2)
    throw InputError(fmt::format("data.group_size must be at least 2, got {}", group_size));
  if (groups_per_step < 1)
    throw InputError(fmt::format("listwise: {} groups a step", groups_per_step));
  std::map<int64_t, Group> by_id;  // ordered by group id: the file's order
  int64_t ungrouped = 0;
  for (size_t i = 0; i < examples->size(); ++i) {
    const auto& e = (*examples)[i];
    if (e.group < 0) {
      ++ungrouped;
      continue;
    }
    Group& g = by_id[e.group];
    (e.relevance > 0.0f ? g.positives : g.negatives).push_back(static_cast<int64_t>(i));
  }
  if (ungrouped > 0)
    throw InputError(fmt::format(
        "training.loss listwise / margin_mse: {} training rows have no query group (set "
        "data.group_field, or use FlagEmbedding's nested format)",
        ungrouped));
  for (auto& [id, g] : by_id) {
    if (g.positives.empty()) {
      ++without_positive_;
    } else if (g.negatives.empty()) {
      ++without_negative_;
    } else {
      if (static_cast<int64_t>(g.negatives.size()) < group_size_ - 1) ++padded_groups_;
      groups_.push_back(std::move(g));
    }
  }
  if (groups_.empty())
    throw InputError(
        "training.loss listwise / margin_mse: no training group has both a relevant row and a row "
        "of relevance 0");
}

std::vector<std::vector<int64_t>> GroupSampler::epoch(int64_t epoch) const {
  std::mt19937_64 rng(seed_ * 0xA0761D6478BD642Full + 0xE7037ED1A0B428DBull * (epoch + 1));
  auto below = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  std::vector<size_t> order(groups_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[below(i)]);
  std::vector<std::vector<int64_t>> steps;
  const size_t want = static_cast<size_t>(group_size_ - 1);
  std::vector<int64_t> pool;
  for (size_t at = 0; at < order.size(); ++at) {
    if (at % static_cast<size_t>(groups_per_step_) == 0) steps.emplace_back();
    std::vector<int64_t>& rows = steps.back();
    const Group& g = groups_[order[at]];
    rows.push_back(g.positives[below(g.positives.size())]);
    // FlagEmbedding: negatives repeated ceil(want / n) times when fewer than `want`, then
    // `want` drawn without replacement (a partial Fisher-Yates).
    const size_t repeat = (want + g.negatives.size() - 1) / g.negatives.size();
    pool.clear();
    for (size_t r = 0; r < repeat; ++r)
      pool.insert(pool.end(), g.negatives.begin(), g.negatives.end());
    for (size_t k = 0; k < want; ++k) {
      std::swap(pool[k], pool[k + below(pool.size() - k)]);
      rows.push_back(pool[k]);
    }
  }
  for (auto& rows : steps) sort_by_length(rows);
  return steps;
}

// Reorders a step's groups (group_size rows each) by their longest row, ascending and stable.
void GroupSampler::sort_by_length(std::vector<int64_t>& rows) const {
  const size_t gs = static_cast<size_t>(group_size_), n = rows.size() / gs;
  std::vector<std::pair<size_t, size_t>> longest(n);  // (length, group)
  for (size_t g = 0; g < n; ++g) {
    longest[g] = {0, g};
    for (size_t k = 0; k < gs; ++k)
      longest[g].first = std::max(
          longest[g].first, (*examples_)[static_cast<size_t>(rows[g * gs + k])].input_ids.size());
  }
  std::stable_sort(longest.begin(), longest.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int64_t> sorted;
  sorted.reserve(rows.size());
  for (const auto& [len, g] : longest)
    sorted.insert(sorted.end(), rows.begin() + g * gs, rows.begin() + (g + 1) * gs);
  rows = std::move(sorted);
}

const std::vector<int64_t>& GroupSampler::batch(int64_t global_step) {
  const int64_t e = epoch_of(global_step);
  if (e != cached_epoch_) {
    cached_ = epoch(e);
    cached_epoch_ = e;
  }
  return cached_.at(static_cast<size_t>(global_step % batches_per_epoch()));
}

}  // namespace ftune
