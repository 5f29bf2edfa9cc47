// The "above" (bad) trials of one TPE parameter block, kept as a bounded mixture summary that
// updates in O(depth) per trial instead of being rebuilt from the whole history per suggestion.
//
// Each trial becomes a point in a box of fixed-point coordinates (numeric dimensions: the
// Parzen estimator's internal scale, log where log, the range cut into 2^20 units; categorical:
// the choice index). A binary space-partition tree with fixed split positions (each node halves
// its relatively widest dimension) holds per node exact integer sums: count, sum of trial
// numbers, per numeric dimension sum q and sum q^2, per categorical dimension counts per
// choice. Insert and erase walk one root-to-leaf path; since a node's sums depend only on which
// trials lie in its box, the state is a function of the set of trials, not of the order they
// arrived in (workers sharing a storage see finished trials in different orders) and a rebuild
// from storage gives the same state bit for bit.
//
// summarize(m): a frontier of at most m nodes, chosen best-first from the root by splitting the
// node whose merge loses most (weight times spread in bandwidths squared, times how much its
// kernel reaches the points g(x) will be evaluated near: TPE's below trials), each node given as
// one kernel: its weight, mean and variance per numeric dimension, choice frequencies per
// categorical one. With no more than m trials every node is a single trial: exact.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "hpo/trial.h"

namespace ftune::hpo {

class AboveIndex {
 public:
  // dists: the block's distributions, in the order values are passed.
  explicit AboveIndex(std::vector<Distribution> dists);

  void insert(int64_t number, const std::vector<double>& values);  // values as in Params
  void erase(int64_t number);
  bool contains(int64_t number) const { return points_.count(number) > 0; }
  size_t size() const { return points_.size(); }

  // A summary: kernel k's weight, member count, and per dimension d: numeric mean[d][k] and
  // var[d][k] (internal scale) and, for a single member, gap[d][k], its distance to the
  // farther of its neighbours among all members in that dimension (the range's ends count as
  // neighbours; without `endpoints` the first and last member use their inner gap: Optuna's
  // bandwidth rule), NaN for merged nodes; categorical freq[d][k * n_choices + c].
  struct Summary {
    std::vector<double> weight;
    std::vector<int64_t> count;
    std::vector<std::vector<double>> mean, var, gap, freq;
  };
  Summary summarize(size_t max_kernels, double a, double b,
                                const std::vector<double>& bandwidth,
                                const std::vector<std::vector<double>>& at = {},
                                bool endpoints = false) const;

  int64_t min_number() const { return *numbers_.begin(); }  // size() > 0
  int64_t max_number() const { return *numbers_.rbegin(); }
  // Internal-scale bounds [lo, hi] of numeric dimension d (extended by step/2 when discrete).
  double lo(size_t d) const { return dims_[d].lo; }
  double hi(size_t d) const { return dims_[d].hi; }

 private:
  struct Dim {
    Distribution dist;
    bool categorical = false;
    double lo = 0, hi = 0;  // numeric: internal-scale bounds
    int64_t width = 0;      // root box width in units (a power of two)
    size_t offset = 0;      // first stat slot of this dimension
  };
  struct Node {
    int64_t count = 0, sum_number = 0;
    int32_t child[2] = {-1, -1};
    std::vector<int64_t> stats;    // per numeric dim: sum q, sum q^2; per categorical: counts
    std::vector<int64_t> members;  // leaf only: trial numbers (several only at full depth)
  };

  std::vector<int64_t> quantize(const std::vector<double>& values) const;
  void add(Node& node, int64_t number, const std::vector<int64_t>& q, int64_t sign) const;
  // The dimension a node of box widths `w` splits on (-1: a single unit, cannot split).
  int split_dim(const std::vector<int64_t>& w) const;
  int32_t new_node();
  void add_kernel(Summary& out, const Node& n, double a, double b) const;
  // log of: weight times the members' spread in squared bandwidths (numeric dimensions) plus a
  // fixed spread times the Gini impurity (categorical), times the merged kernel's largest
  // density at the points `at` (internal scale): what merging the node loses where it matters.
  // -inf: nothing to lose (one member, or members at one point).
  struct Scratch {  // merge_loss's buffers, reused across the nodes of one summarize
    std::vector<double> mean, inv_s2, log_choice;
    std::vector<size_t> choice_at;
  };
  double merge_loss(const Node& n, double a, double b, const std::vector<double>& bandwidth,
                    const std::vector<std::vector<double>>& at, Scratch& scratch) const;

  std::vector<Dim> dims_;
  size_t n_stats_ = 0;
  std::vector<Node> nodes_;  // nodes_[0]: root
  std::unordered_map<int64_t, std::vector<int64_t>> points_;  // number -> quantized point
  std::set<int64_t> numbers_;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> sorted_;  // per dim: (q, number), sorted
  double gap(size_t d, int64_t number, bool endpoints) const;
};

}  // namespace ftune::hpo
