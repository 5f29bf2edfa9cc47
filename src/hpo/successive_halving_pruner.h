// Optuna's SuccessiveHalvingPruner (asynchronous successive halving, ASHA) and HyperbandPruner,
// which runs one successive-halving pruner per bracket over the trials assigned to it.
#pragma once

#include <optional>

#include "hpo/pruner.h"

namespace ftune::hpo {

struct SuccessiveHalvingOptions {
  std::optional<int64_t> min_resource;  // nullopt: "auto" (last step of the first completed / 100)
  int64_t reduction_factor = 4;
  int64_t min_early_stopping_rate = 0;
  int64_t bootstrap_count = 0;
};

class SuccessiveHalvingPruner : public Pruner {
 public:
  SuccessiveHalvingPruner(SuccessiveHalvingOptions o, Direction direction)
      : o_(o), direction_(direction), auto_resource_(!o.min_resource) {}
  bool should_prune(const Trial& trial, int64_t step,
                    const std::vector<Trial>& trials) const override;
  // The decision among `competitors` only (Hyperband passes the trials of one bracket).
  bool should_prune_among(const Trial& trial, int64_t step,
                          const std::vector<const Trial*>& competitors,
                          const std::vector<Trial>& all) const;

 private:
  friend class HyperbandPruner;
  SuccessiveHalvingOptions o_;
  Direction direction_;
  bool auto_resource_;  // a resource is "auto": nothing is recorded before the first completion
};

struct HyperbandOptions {
  int64_t min_resource = 1;
  std::optional<int64_t> max_resource;  // nullopt: "auto" (last step of the first completed + 1)
  int64_t reduction_factor = 3;
  int64_t bootstrap_count = 0;
};

class HyperbandPruner : public Pruner {
 public:
  HyperbandPruner(HyperbandOptions o, Direction direction, std::string study_name)
      : o_(o), direction_(direction), study_name_(std::move(study_name)) {}
  bool should_prune(const Trial& trial, int64_t step,
                    const std::vector<Trial>& trials) const override;
  // The bracket of trial `number` given max_resource (Optuna's _get_bracket_id).
  int64_t bracket_of(int64_t number, int64_t max_resource) const;

 private:
  HyperbandOptions o_;
  Direction direction_;
  std::string study_name_;
};

// The first trial to complete (smallest end_time, then number) among those with reports; the
// "auto" resources of both pruners are read from it, so they never change during a study.
const Trial* first_completed(const std::vector<Trial>& trials);

// zlib's crc32 of `s` (Optuna's binascii.crc32).
uint32_t crc32(const std::string& s);

}  // namespace ftune::hpo
