// AboveIndex (see above_index.h): fixed-point quantization, the path walk that inserts and
// erases a trial, and the best-first frontier that summarizes the tree as a bounded mixture.
#include "hpo/above_index.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "hpo/parzen_estimator.h"

namespace ftune::hpo {
namespace {

constexpr int kBits = 20;                    // numeric resolution: range / 2^20
constexpr int64_t kUnits = int64_t{1} << kBits;
constexpr int64_t kMaxPoints = int64_t{1} << 22;  // keeps sum q^2 (< n 2^42) inside int64
constexpr double kCategoricalSpread = 100.0;  // a mixed-choice node counts as this many bw^2

int64_t pow2_at_least(int64_t n) {
  int64_t w = 1;
  while (w < n) w *= 2;
  return w;
}

}  // namespace

AboveIndex::AboveIndex(std::vector<Distribution> dists) {
  for (auto& dist : dists) {
    Dim d;
    d.categorical = dist.kind == Distribution::Kind::Categorical;
    d.offset = n_stats_;
    if (d.categorical) {
      d.width = pow2_at_least(static_cast<int64_t>(dist.choices.size()));
      n_stats_ += dist.choices.size();
    } else {
      std::tie(d.lo, d.hi) = parzen_bounds(dist);  // the Parzen estimator's internal range
      d.width = 2 * kUnits;  // q in [0, 2^20] inside the root box [0, 2^21)
      n_stats_ += 2;
    }
    d.dist = std::move(dist);
    dims_.push_back(std::move(d));
  }
  sorted_.resize(dims_.size());
}

double AboveIndex::gap(size_t d, int64_t number, bool endpoints) const {
  const int64_t q = points_.at(number)[d];
  const auto& s = sorted_[d];
  const auto it = std::lower_bound(s.begin(), s.end(), std::make_pair(q, number));
  const bool first = it == s.begin(), last = std::next(it) == s.end();
  const int64_t left = q - (first ? 0 : std::prev(it)->first);
  const int64_t right = (last ? kUnits : std::next(it)->first) - q;
  int64_t g = std::max(left, right);
  if (!endpoints && s.size() >= 2) g = first ? right : last ? left : g;
  return static_cast<double>(g) * (dims_[d].hi - dims_[d].lo) / static_cast<double>(kUnits);
}

std::vector<int64_t> AboveIndex::quantize(const std::vector<double>& values) const {
  FTUNE_ASSERT(values.size() == dims_.size(), "{} values for {} dimensions", values.size(),
               dims_.size());
  std::vector<int64_t> q(dims_.size());
  for (size_t i = 0; i < dims_.size(); ++i) {
    const Dim& d = dims_[i];
    if (d.categorical) {
      q[i] = static_cast<int64_t>(values[i]);
      FTUNE_ASSERT(q[i] >= 0 && q[i] < static_cast<int64_t>(d.dist.choices.size()),
                   "choice {} out of range", q[i]);
      continue;
    }
    const double t = d.dist.log ? std::log(values[i]) : values[i];
    const double u = d.hi > d.lo ? (t - d.lo) / (d.hi - d.lo) : 0.0;
    q[i] = std::clamp<int64_t>(std::llround(u * static_cast<double>(kUnits)), 0, kUnits);
  }
  return q;
}

void AboveIndex::add(Node& node, int64_t number, const std::vector<int64_t>& q,
                     int64_t sign) const {
  node.count += sign;
  node.sum_number += sign * number;
  if (node.stats.empty()) node.stats.assign(n_stats_, 0);
  for (size_t i = 0; i < dims_.size(); ++i) {
    const Dim& d = dims_[i];
    if (d.categorical) {
      node.stats[d.offset + static_cast<size_t>(q[i])] += sign;
    } else {
      node.stats[d.offset] += sign * q[i];
      node.stats[d.offset + 1] += sign * q[i] * q[i];
    }
  }
}

int AboveIndex::split_dim(const std::vector<int64_t>& w) const {
  // Round robin by depth: the dimension halved fewest times so far (lowest index on ties).
  int best = -1, best_level = 0;
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (w[i] <= 1) continue;
    const int level = __builtin_ctzll(static_cast<uint64_t>(dims_[i].width)) -
                      __builtin_ctzll(static_cast<uint64_t>(w[i]));
    if (best < 0 || level < best_level) {
      best = static_cast<int>(i);
      best_level = level;
    }
  }
  return best;
}

int32_t AboveIndex::new_node() {
  nodes_.emplace_back();
  nodes_.back().stats.assign(n_stats_, 0);
  return static_cast<int32_t>(nodes_.size() - 1);
}

void AboveIndex::insert(int64_t number, const std::vector<double>& values) {
  if (contains(number)) return;
  FTUNE_ASSERT(static_cast<int64_t>(points_.size()) < kMaxPoints, "above index is full");
  const std::vector<int64_t> q = quantize(values);
  points_.emplace(number, q);
  numbers_.insert(number);
  for (size_t i = 0; i < dims_.size(); ++i) {
    const std::pair<int64_t, int64_t> key{q[i], number};
    sorted_[i].insert(std::lower_bound(sorted_[i].begin(), sorted_[i].end(), key), key);
  }
  if (nodes_.empty()) new_node();
  std::vector<int64_t> lo(dims_.size(), 0), w(dims_.size());
  for (size_t i = 0; i < dims_.size(); ++i) w[i] = dims_[i].width;
  int32_t at = 0;
  for (;;) {
    add(nodes_[static_cast<size_t>(at)], number, q, +1);
    const int d = split_dim(w);
    Node* node = &nodes_[static_cast<size_t>(at)];
    if (node->child[0] < 0) {  // a leaf: keep the point here, or push the resident down
      if (node->members.empty() || d < 0) {
        node->members.push_back(number);
        return;
      }
      const int32_t c0 = new_node(), c1 = new_node();
      node = &nodes_[static_cast<size_t>(at)];  // new_node may move the vector
      node->child[0] = c0;
      node->child[1] = c1;
      const auto du = static_cast<size_t>(d);
      for (int64_t m : node->members) {
        const std::vector<int64_t>& qm = points_.at(m);
        Node& c = nodes_[static_cast<size_t>(qm[du] >= lo[du] + w[du] / 2 ? c1 : c0)];
        add(c, m, qm, +1);
        c.members.push_back(m);
      }
      node->members.clear();
    }
    const auto du = static_cast<size_t>(d);
    w[du] /= 2;
    const bool right = q[du] >= lo[du] + w[du];
    if (right) lo[du] += w[du];
    at = nodes_[static_cast<size_t>(at)].child[right ? 1 : 0];
  }
}

void AboveIndex::erase(int64_t number) {
  auto it = points_.find(number);
  if (it == points_.end()) return;
  const std::vector<int64_t> q = std::move(it->second);
  points_.erase(it);
  numbers_.erase(number);
  for (size_t i = 0; i < dims_.size(); ++i)
    sorted_[i].erase(
        std::lower_bound(sorted_[i].begin(), sorted_[i].end(), std::make_pair(q[i], number)));
  std::vector<int64_t> lo(dims_.size(), 0), w(dims_.size());
  for (size_t i = 0; i < dims_.size(); ++i) w[i] = dims_[i].width;
  int32_t at = 0;
  for (;;) {
    Node& node = nodes_[static_cast<size_t>(at)];
    add(node, number, q, -1);
    if (node.child[0] < 0) {
      auto m = std::find(node.members.begin(), node.members.end(), number);
      FTUNE_ASSERT(m != node.members.end(), "trial {} missing from its leaf", number);
      node.members.erase(m);
      return;
    }
    const auto du = static_cast<size_t>(split_dim(w));
    w[du] /= 2;
    const bool right = q[du] >= lo[du] + w[du];
    if (right) lo[du] += w[du];
    at = node.child[right ? 1 : 0];
  }
}

void AboveIndex::add_kernel(Summary& out, const Node& n, double a, double b) const {
  out.count.push_back(n.count);
  out.weight.push_back(a * static_cast<double>(n.count) + b * static_cast<double>(n.sum_number));
  const auto c = static_cast<__int128>(n.count);
  for (size_t i = 0; i < dims_.size(); ++i) {
    const Dim& d = dims_[i];
    if (d.categorical) {
      for (size_t j = 0; j < d.dist.choices.size(); ++j)
        out.freq[i].push_back(static_cast<double>(n.stats[d.offset + j]) /
                              static_cast<double>(n.count));
      continue;
    }
    const int64_t s1 = n.stats[d.offset], s2 = n.stats[d.offset + 1];
    const double scale = (d.hi - d.lo) / static_cast<double>(kUnits);
    out.mean[i].push_back(d.lo + static_cast<double>(s1) / static_cast<double>(n.count) * scale);
    // n^2 var = n sum q^2 - (sum q)^2, exact in 128-bit integers (never negative).
    const __int128 v = c * static_cast<__int128>(s2) - static_cast<__int128>(s1) * s1;
    out.var[i].push_back(static_cast<double>(v) / static_cast<double>(c * c) * scale * scale);
  }
}

double AboveIndex::merge_loss(const Node& n, double a, double b,
                              const std::vector<double>& bandwidth,
                              const std::vector<std::vector<double>>& at,
                              Scratch& scratch) const {
  const double minus_inf = -std::numeric_limits<double>::infinity();
  if (n.count <= 1) return minus_inf;
  const auto c = static_cast<double>(n.count);
  const size_t nd = dims_.size();
  double spread = 0, norm = 1;  // norm: product of 1 / sigma^2 (one log at the end)
  auto& [mean, inv_s2, log_choice, choice_at] = scratch;
  mean.resize(nd);
  inv_s2.resize(nd);
  choice_at.resize(nd);
  log_choice.clear();
  for (size_t i = 0; i < nd; ++i) {
    const Dim& d = dims_[i];
    if (d.categorical) {
      const auto nc = static_cast<double>(d.dist.choices.size());
      double gini = 1;
      choice_at[i] = log_choice.size();
      for (size_t j = 0; j < d.dist.choices.size(); ++j) {
        const double f = static_cast<double>(n.stats[d.offset + j]) / c;
        gini -= f * f;
        log_choice.push_back(at.empty() ? 0.0 : std::log((f + 0.1) / (1.0 + 0.1 * nc)));
      }
      spread += kCategoricalSpread * gini;
    } else {
      const double unit = (d.hi - d.lo) / static_cast<double>(kUnits);
      const double m = static_cast<double>(n.stats[d.offset]) / c;
      const double v = std::max(0.0, static_cast<double>(n.stats[d.offset + 1]) / c - m * m);
      const double var = v * unit * unit, s2 = var + bandwidth[i] * bandwidth[i];
      mean[i] = d.lo + m * unit;
      inv_s2[i] = 1.0 / s2;
      norm *= inv_s2[i];
      spread += var / (bandwidth[i] * bandwidth[i]);
    }
  }
  if (spread <= 0) return minus_inf;
  const double log_norm = 0.5 * std::log(norm);
  // Relevance: the node's merged kernel's largest log-density at the points g(x) will be
  // evaluated near (none given: 0), so nodes far from all of them stay merged.
  double relevance = at.empty() ? 0.0 : minus_inf;
  for (const auto& t : at) {
    double lk = log_norm;
    for (size_t i = 0; i < nd; ++i) {
      if (dims_[i].categorical) {
        lk += log_choice[choice_at[i] + static_cast<size_t>(t[i])];
      } else {
        lk -= 0.5 * (t[i] - mean[i]) * (t[i] - mean[i]) * inv_s2[i];
      }
    }
    relevance = std::max(relevance, lk);
  }
  const double weight = a * c + b * static_cast<double>(n.sum_number);
  return std::log(std::max(weight, 1e-300)) + std::log(spread) + relevance;
}

AboveIndex::Summary AboveIndex::summarize(
    size_t max_kernels, double a, double b, const std::vector<double>& bandwidth,
    const std::vector<std::vector<double>>& at, bool endpoints) const {
  Summary out;
  out.mean.resize(dims_.size());
  out.var.resize(dims_.size());
  out.gap.resize(dims_.size());
  out.freq.resize(dims_.size());
  if (points_.empty()) return out;
  FTUNE_ASSERT(max_kernels >= 1, "max_kernels must be positive");
  const size_t nd = dims_.size();
  // Frontier entries: (merge loss, node, box) with each box's lower corner and widths kept in
  // `boxes` (2 * nd values from box * 2 * nd). Ties go by box, never by node numbering.
  struct Entry {
    double loss;
    int32_t node;
    size_t box;
  };
  std::vector<int64_t> boxes;
  auto box_less = [&](size_t x, size_t y) {
    return std::lexicographical_compare(boxes.begin() + static_cast<ptrdiff_t>(x * 2 * nd),
                                        boxes.begin() + static_cast<ptrdiff_t>((x + 1) * 2 * nd),
                                        boxes.begin() + static_cast<ptrdiff_t>(y * 2 * nd),
                                        boxes.begin() + static_cast<ptrdiff_t>((y + 1) * 2 * nd));
  };
  auto heap_less = [&](const Entry& x, const Entry& y) {
    return x.loss != y.loss ? x.loss < y.loss : box_less(x.box, y.box);
  };
  std::vector<Entry> heap, done;
  Scratch scratch;
  std::vector<int64_t> lo(nd), w(nd);
  // The points on the internal scale (log where log), converted once.
  std::vector<std::vector<double>> points = at;
  for (auto& x : points)
    for (size_t i = 0; i < nd; ++i)
      if (!dims_[i].categorical && dims_[i].dist.log) x[i] = std::log(x[i]);
  auto push = [&](int32_t node) {  // the node with box (lo, w)
    const Node& n = nodes_[static_cast<size_t>(node)];
    if (n.count == 0) return;
    const size_t box = boxes.size() / (2 * nd);
    boxes.insert(boxes.end(), lo.begin(), lo.end());
    boxes.insert(boxes.end(), w.begin(), w.end());
    heap.push_back(Entry{merge_loss(n, a, b, bandwidth, points, scratch), node, box});
    std::push_heap(heap.begin(), heap.end(), heap_less);
  };
  for (size_t i = 0; i < nd; ++i) w[i] = dims_[i].width;
  push(0);
  while (!heap.empty()) {
    if (done.size() + heap.size() + 1 > max_kernels) break;  // a split would exceed the cap
    std::pop_heap(heap.begin(), heap.end(), heap_less);
    const Entry e = heap.back();
    heap.pop_back();
    const Node& n = nodes_[static_cast<size_t>(e.node)];
    if (e.loss == -std::numeric_limits<double>::infinity() || n.child[0] < 0) {
      done.push_back(e);
      continue;
    }
    const auto at = static_cast<ptrdiff_t>(e.box * 2 * nd);
    std::copy(boxes.begin() + at, boxes.begin() + at + static_cast<ptrdiff_t>(nd), lo.begin());
    std::copy(boxes.begin() + at + static_cast<ptrdiff_t>(nd),
              boxes.begin() + at + static_cast<ptrdiff_t>(2 * nd), w.begin());
    // Split; through a chain of nodes whose members all lie on one side (same sums, same
    // loss) straight down to the first node that divides them, or a leaf.
    for (const Node* m = &n;;) {
      const auto d = static_cast<size_t>(split_dim(w));
      w[d] /= 2;
      const int32_t c0 = m->child[0], c1 = m->child[1];
      const bool empty0 = nodes_[static_cast<size_t>(c0)].count == 0;
      const bool empty1 = nodes_[static_cast<size_t>(c1)].count == 0;
      if (empty0 != empty1) {
        if (empty0) lo[d] += w[d];
        m = &nodes_[static_cast<size_t>(empty0 ? c1 : c0)];
        if (m->child[0] < 0) {
          push(empty0 ? c1 : c0);
          break;
        }
        continue;
      }
      push(c0);
      lo[d] += w[d];
      push(c1);
      break;
    }
  }
  done.insert(done.end(), heap.begin(), heap.end());
  // Kernels in box order: the mixture's summation order is then a function of the trial set.
  std::sort(done.begin(), done.end(), [&](const Entry& x, const Entry& y) { return box_less(x.box, y.box); });
  for (const Entry& e : done) {
    const Node* n = &nodes_[static_cast<size_t>(e.node)];
    add_kernel(out, *n, a, b);
    if (n->count == 1) {
      while (n->child[0] >= 0)  // the single member sits in the one non-empty leaf below
        n = &nodes_[static_cast<size_t>(nodes_[static_cast<size_t>(n->child[0])].count > 0
                                            ? n->child[0]
                                            : n->child[1])];
    }
    for (size_t i = 0; i < dims_.size(); ++i)
      if (!dims_[i].categorical)
        out.gap[i].push_back(n->count == 1 ? gap(i, n->members.at(0), endpoints)
                                           : std::numeric_limits<double>::quiet_NaN());
  }
  return out;
}

}  // namespace ftune::hpo
