// Tree-structured Parzen Estimator sampler, following Optuna's TPESampler decision for decision:
// after n_startup_trials finished trials, the best gamma(n) = min(ceil(0.1 n), 25) trials (complete
// ones by value, then pruned ones by the last step they reached and their last value there) form
// l(x), the rest g(x); n_ei_candidates drawn from l(x) are scored by log l(x) - log g(x) and the
// best is proposed. Univariate: one estimator per parameter. Multivariate: one joint estimator over
// the parameters every finished trial has, the rest univariate; group: one joint estimator per
// group of parameters that always occur together (conditional spaces). Constant liar: running
// trials join g(x), so parallel workers spread out. Three defaults depart from Optuna's
// (tpe_options.h; Optuna's behaviour with n_ei_candidates_per_dim: 0, below_bandwidth_factor: 1,
// max_above_kernels: 0): more candidates for joint blocks of many parameters, narrower l(x)
// kernels, and g(x) summarized past max_above_kernels above trials.
//
// Finished trials are kept sorted incrementally (by objective, by pruned score, and per
// parameter by value), so a suggestion never re-sorts the history: the split takes the first
// gamma(n) entries and the kernel bandwidths come from one linear walk per parameter.
//
// Past max_above_kernels "above" trials in a block, g(x) comes from an AboveIndex per block
// instead: fed the trials observed since its last use (arrival order, so trials that other
// workers finished count as soon as the worker sees them) and the changes of the below set, it
// yields at most max_above_kernels kernels whatever the number of trials. A fresh sampler fed
// the same trials (a restart) builds the same index: its state depends on the set of trials.
#pragma once

#include <set>
#include <tuple>
#include <unordered_map>

#include "hpo/above_index.h"
#include "hpo/parzen_estimator.h"
#include "hpo/sampler.h"
#include "hpo/tpe_options.h"

namespace ftune::hpo {

class TpeSampler : public Sampler {
 public:
  TpeSampler(TpeOptions o, Direction direction, uint64_t seed)
      : o_(o), direction_(direction), seed_(seed) {}
  void observe(const Trial& finished) override;
  Params sample(const SearchSpace& space, int64_t number,
                const std::vector<Trial>& running) override;

  int64_t n_observed() const { return static_cast<int64_t>(obs_.size()); }

 private:
  struct Obs {
    int64_t number;
    Params params;
  };
  struct Split {
    std::vector<int64_t> below;  // trial numbers, ascending
  };

  Split split() const;
  // Joint TPE proposal for the parameters `names` (all numeric or categorical; none single).
  Params sample_group(const std::vector<const ParamSpec*>& names, const Split& split,
                      const std::vector<const Trial*>& liars, std::mt19937_64& rng);
  // The block's index brought up to date with the trials observed and the split.
  AboveIndex& synced_index(const std::vector<const ParamSpec*>& names, const Split& split);
  void rebuild_positions();
  int64_t position(int64_t number) const;  // index in obs_, -1 when not observed

  TpeOptions o_;
  Direction direction_;
  uint64_t seed_;
  std::vector<Obs> obs_;           // complete + pruned trials, by number
  std::vector<int64_t> position_;  // number -> index in obs_ (-1: none)
  std::unordered_map<std::string, std::vector<double>> columns_;  // name -> value per obs_ index
  std::set<std::pair<double, int64_t>> complete_;                 // (value, minimize sense), number
  std::set<std::tuple<double, double, int64_t>> pruned_;          // (-last step, value), number
  std::unordered_map<std::string, std::vector<std::pair<double, int64_t>>> by_value_;
  std::unordered_map<std::string, int64_t> count_;  // finished trials having each parameter
  std::vector<std::set<std::string>> groups_;       // group decomposition of the observed params
  std::vector<int64_t> arrivals_;  // numbers of obs_ in the order they were observed
  struct BlockIndex {
    std::vector<Distribution> dists;
    AboveIndex index;
    size_t cursor = 0;           // arrivals_ fed so far
    std::vector<int64_t> below;  // the below set the index excludes
  };
  std::unordered_map<std::string, BlockIndex> indexes_;  // key: the block's names
};

}  // namespace ftune::hpo
