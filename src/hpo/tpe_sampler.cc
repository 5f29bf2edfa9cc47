// TPE sampler (see tpe_sampler.h): incremental bookkeeping of finished trials, the below/above
// split, and one TPE proposal per group of parameters.
#include "hpo/tpe_sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "hpo/above_mixture.h"
#include "hpo/parzen_estimator.h"

namespace ftune::hpo {
namespace {

constexpr uint64_t kRandomStream = 0, kTpeStream = 1;

bool has_all(const Params& p, const std::vector<const ParamSpec*>& names) {
  for (const ParamSpec* s : names)
    if (!p.count(s->name)) return false;
  return true;
}

bool single(const Distribution& d) {
  return d.kind == Distribution::Kind::Categorical ? d.choices.size() == 1 : d.low == d.high;
}

}  // namespace

void TpeSampler::rebuild_positions() {
  std::fill(position_.begin(), position_.end(), -1);
  for (size_t i = 0; i < obs_.size(); ++i)
    position_[static_cast<size_t>(obs_[i].number)] = static_cast<int64_t>(i);
}

int64_t TpeSampler::position(int64_t number) const {
  return number >= 0 && static_cast<size_t>(number) < position_.size()
             ? position_[static_cast<size_t>(number)]
             : -1;
}

void TpeSampler::observe(const Trial& t) {
  if (t.number < 0 || position(t.number) >= 0) return;
  if (t.state == TrialState::Complete) {
    if (!t.value || std::isnan(*t.value)) return;
    const double v = direction_ == Direction::Minimize ? *t.value : -*t.value;
    complete_.insert({v, t.number});
  } else if (t.state == TrialState::Pruned) {
    // Optuna's _get_pruned_trial_score: later steps first, then the value there (NaN last).
    if (t.intermediate.empty()) {
      pruned_.insert({1.0, 0.0, t.number});
    } else {
      const auto [step, v] = *t.intermediate.rbegin();
      const double score = std::isnan(v) ? std::numeric_limits<double>::infinity()
                                         : (direction_ == Direction::Minimize ? v : -v);
      pruned_.insert({-static_cast<double>(step), score, t.number});
    }
  } else {
    return;  // failed / unfinished trials teach nothing
  }
  arrivals_.push_back(t.number);
  Obs o{t.number, t.params};
  size_t at = obs_.size();
  if (position_.size() <= static_cast<size_t>(t.number))
    position_.resize(static_cast<size_t>(t.number) + 1, -1);
  if (obs_.empty() || obs_.back().number < t.number) {
    position_[static_cast<size_t>(t.number)] = static_cast<int64_t>(obs_.size());
    obs_.push_back(std::move(o));
  } else {
    auto it = std::lower_bound(obs_.begin(), obs_.end(), t.number,
                               [](const Obs& a, int64_t n) { return a.number < n; });
    at = static_cast<size_t>(it - obs_.begin());
    obs_.insert(it, std::move(o));
    rebuild_positions();
  }
  const double kAbsent = std::numeric_limits<double>::quiet_NaN();
  for (auto& [name, column] : columns_)
    column.insert(column.begin() + static_cast<ptrdiff_t>(at), kAbsent);
  for (const auto& [name, v] : t.params) {
    auto [it, fresh] = columns_.try_emplace(name);
    if (fresh) it->second.assign(obs_.size(), kAbsent);
    it->second[at] = v;
  }
  for (const auto& [name, v] : t.params) {
    auto& sorted = by_value_[name];
    const std::pair<double, int64_t> key{v, t.number};
    sorted.insert(std::lower_bound(sorted.begin(), sorted.end(), key), key);
    ++count_[name];
  }
  // Group decomposition (Optuna's _SearchSpaceGroup.add_distributions): split every group by
  // this trial's parameter set, and add its parameters no group holds yet as a new group.
  std::set<std::string> names;
  for (const auto& [name, v] : t.params) names.insert(name);
  std::vector<std::set<std::string>> next;
  std::set<std::string> covered;
  for (const auto& g : groups_) {
    std::set<std::string> in, out;
    for (const auto& n : g) (names.count(n) ? in : out).insert(n);
    covered.insert(g.begin(), g.end());
    if (!in.empty()) next.push_back(std::move(in));
    if (!out.empty()) next.push_back(std::move(out));
  }
  std::set<std::string> fresh;
  for (const auto& n : names)
    if (!covered.count(n)) fresh.insert(n);
  if (!fresh.empty()) next.push_back(std::move(fresh));
  groups_ = std::move(next);
}

TpeSampler::Split TpeSampler::split() const {
  const auto n = static_cast<int64_t>(obs_.size());
  int64_t n_below =
      std::min<int64_t>(static_cast<int64_t>(std::ceil(0.1 * static_cast<double>(n))), 25);
  Split s;
  for (auto it = complete_.begin(); it != complete_.end() && n_below > 0; ++it, --n_below)
    s.below.push_back(it->second);
  for (auto it = pruned_.begin(); it != pruned_.end() && n_below > 0; ++it, --n_below)
    s.below.push_back(std::get<2>(*it));
  std::sort(s.below.begin(), s.below.end());
  return s;
}

AboveIndex& TpeSampler::synced_index(const std::vector<const ParamSpec*>& names,
                                     const Split& split) {
  std::string key;
  std::vector<Distribution> dists;
  for (const ParamSpec* p : names) {
    key += p->name + '\n';
    dists.push_back(p->dist);
  }
  auto it = indexes_.find(key);
  if (it == indexes_.end() || it->second.dists != dists) {  // new block (or redefined): rebuild
    indexes_.erase(key);
    it = indexes_.emplace(key, BlockIndex{dists, AboveIndex(dists), 0, {}}).first;
  }
  BlockIndex& b = it->second;
  std::vector<double> v;
  auto values_of = [&](int64_t number) {
    const Params& p = obs_[static_cast<size_t>(position(number))].params;
    v.clear();
    for (const ParamSpec* s : names) {
      auto f = p.find(s->name);
      if (f == p.end()) return false;
      v.push_back(f->second);
    }
    return true;
  };
  // Deltas only: the trials observed since the last sync, then the members that left or joined
  // the below set (which g(x) excludes).
  for (; b.cursor < arrivals_.size(); ++b.cursor)
    if (values_of(arrivals_[b.cursor])) b.index.insert(arrivals_[b.cursor], v);
  for (int64_t n : b.below)
    if (!std::binary_search(split.below.begin(), split.below.end(), n) && values_of(n))
      b.index.insert(n, v);
  for (int64_t n : split.below) b.index.erase(n);
  b.below = split.below;
  return b.index;
}

Params TpeSampler::sample_group(const std::vector<const ParamSpec*>& names, const Split& split,
                                const std::vector<const Trial*>& liars, std::mt19937_64& rng) {
  const size_t dim = names.size();
  std::vector<Distribution> dists;
  for (const ParamSpec* p : names) dists.push_back(p->dist);
  ParzenOptions po{o_.prior_weight, o_.consider_prior, o_.consider_magic_clip,
                   o_.consider_endpoints};
  ParzenOptions pl = po;  // l(x): the below trials' kernels, narrowed
  pl.bandwidth_factor = o_.below_bandwidth_factor;
  const int64_t n_candidates = std::max<int64_t>(
      o_.n_ei_candidates,
      std::llround(o_.n_ei_candidates_per_dim * static_cast<double>(dim)));
  auto propose = [&](const ParzenEstimator& l, const std::vector<std::vector<double>>& candidates,
                     const ParzenEstimator& g) {
    size_t best = 0;
    double best_score = -std::numeric_limits<double>::infinity();
    for (size_t c = 0; c < candidates.size(); ++c) {
      const double score = l.log_pdf(candidates[c]) - g.log_pdf(candidates[c]);
      if (score > best_score || c == 0) {
        best_score = score;
        best = c;
      }
    }
    Params out;
    for (size_t d = 0; d < dim; ++d) out[names[d]->name] = candidates[best][d];
    return out;
  };

  // Many above trials: l(x) exact from the (at most 25) below trials, g(x) summarized.
  const auto cap = static_cast<size_t>(o_.max_above_kernels);
  if (cap > 0 && obs_.size() > cap) {
    AboveIndex& index = synced_index(names, split);
    if (index.size() > cap) {
      std::vector<std::vector<double>> below(dim);
      for (int64_t number : split.below) {
        const Params& p = obs_[static_cast<size_t>(position(number))].params;
        if (!has_all(p, names)) continue;
        for (size_t d = 0; d < dim; ++d) below[d].push_back(p.at(names[d]->name));
      }
      const ParzenEstimator l(dists, below, pl);
      const auto candidates = l.sample(rng, n_candidates);
      std::vector<std::vector<double>> lies;  // running trials with every parameter
      for (const Trial* t : liars) {
        if (!has_all(t->params, names)) continue;
        auto& v = lies.emplace_back();
        for (const ParamSpec* p : names) v.push_back(t->params.at(p->name));
      }
      // The summary is refined near the below trials, which the candidates are drawn around
      // (fewer points than candidates: the refinement's cost does not grow with them).
      std::vector<std::vector<double>> near(below.empty() ? 0 : below[0].size());
      for (size_t j = 0; j < near.size(); ++j)
        for (size_t d = 0; d < dim; ++d) near[j].push_back(below[d][j]);
      const ParzenEstimator g(dists, above_mixture(dists, index, lies, o_,
                                                   near.empty() ? candidates : near));
      return propose(l, candidates, g);
    }
  }

  // Columns of the finished trials' values (NaN: the trial lacks the parameter).
  std::vector<const std::vector<double>*> cols;
  const std::vector<double> never(obs_.size(), std::numeric_limits<double>::quiet_NaN());
  for (const ParamSpec* p : names) {
    auto it = columns_.find(p->name);
    cols.push_back(it == columns_.end() ? &never : &it->second);  // never observed: prior only
  }
  auto has_all_at = [&](size_t pos) {
    for (const auto* c : cols)
      if (std::isnan((*c)[pos])) return false;
    return true;
  };

  // l(x): the below trials that have every parameter, by number.
  std::vector<std::vector<double>> below(dim);
  for (int64_t number : split.below) {
    const auto pos = static_cast<size_t>(position(number));
    if (!has_all_at(pos)) continue;
    for (size_t d = 0; d < dim; ++d) below[d].push_back((*cols[d])[pos]);
  }

  // g(x): the other finished trials and the liars, by number. kernel_of[pos]: the kernel index
  // of finished trial at obs_ position pos (-1: not in g).
  std::vector<std::vector<double>> above(dim);
  for (auto& a : above) a.reserve(obs_.size() + liars.size());
  std::vector<int32_t> kernel_of(obs_.size(), -1);
  std::vector<int32_t> liar_kernel(liars.size(), -1);
  size_t li = 0;
  auto add_liar = [&](size_t i) {
    if (!has_all(liars[i]->params, names)) return;
    liar_kernel[i] = static_cast<int32_t>(above[0].size());
    for (size_t d = 0; d < dim; ++d) above[d].push_back(liars[i]->params.at(names[d]->name));
  };
  size_t bi = 0;
  for (size_t pos = 0; pos < obs_.size(); ++pos) {
    const int64_t number = obs_[pos].number;
    while (li < liars.size() && liars[li]->number < number) add_liar(li++);
    while (bi < split.below.size() && split.below[bi] < number) ++bi;
    if (bi < split.below.size() && split.below[bi] == number) continue;
    if (!has_all_at(pos)) continue;
    kernel_of[pos] = static_cast<int32_t>(above[0].size());
    for (size_t d = 0; d < dim; ++d) above[d].push_back((*cols[d])[pos]);
  }
  for (; li < liars.size(); ++li) add_liar(li);

  // Per-dimension value order of g(x)'s kernels from the incrementally sorted history: one
  // merge with the (few) liars, no sort of the history. Ties follow trial numbers, hence kernel
  // indices, as a stable sort would order them.
  std::vector<std::vector<uint32_t>> order(dim);
  for (size_t d = 0; d < dim; ++d) {
    if (dists[d].kind == Distribution::Kind::Categorical) continue;  // no bandwidths
    const std::string& name = names[d]->name;
    std::vector<std::tuple<double, int64_t, int32_t>> liar_values;
    for (size_t i = 0; i < liars.size(); ++i)
      if (liar_kernel[i] >= 0)
        liar_values.push_back({liars[i]->params.at(name), liars[i]->number, liar_kernel[i]});
    std::sort(liar_values.begin(), liar_values.end());
    auto& out = order[d];
    out.reserve(above[d].size());
    size_t j = 0;
    static const std::vector<std::pair<double, int64_t>> kNone;
    auto bv = by_value_.find(name);
    for (const auto& [v, number] : bv == by_value_.end() ? kNone : bv->second) {
      while (j < liar_values.size() &&
             std::make_pair(std::get<0>(liar_values[j]), std::get<1>(liar_values[j])) <
                 std::make_pair(v, number))
        out.push_back(static_cast<uint32_t>(std::get<2>(liar_values[j++])));
      const int32_t k = kernel_of[static_cast<size_t>(position(number))];
      if (k >= 0) out.push_back(static_cast<uint32_t>(k));
    }
    for (; j < liar_values.size(); ++j)
      out.push_back(static_cast<uint32_t>(std::get<2>(liar_values[j])));
    FTUNE_ASSERT(out.size() == above[d].size(), "order of '{}' has {} of {} kernels", name,
                 out.size(), above[d].size());
  }

  const ParzenEstimator l(dists, below, pl);
  const ParzenEstimator g(dists, above, po, &order);
  return propose(l, l.sample(rng, n_candidates), g);
}

Params TpeSampler::sample(const SearchSpace& space, int64_t number,
                          const std::vector<Trial>& running) {
  Params out;
  if (static_cast<int64_t>(obs_.size()) < o_.n_startup_trials) {
    std::mt19937_64 rng = trial_rng(seed_, number, kRandomStream);
    for (const auto& p : space.params())
      if (space.active(p, out)) out[p.name] = sample_uniform(p.dist, rng);
    return out;
  }
  std::mt19937_64 rng = trial_rng(seed_, number, kTpeStream);
  const Split s = split();
  std::vector<const Trial*> liars;
  if (o_.constant_liar) {
    for (const auto& t : running)
      if (t.number != number && !t.finished() && position(t.number) < 0) liars.push_back(&t);
    std::sort(liars.begin(), liars.end(),
              [](const Trial* a, const Trial* b) { return a->number < b->number; });
  }

  Params joint;
  if (o_.multivariate) {
    std::vector<std::vector<const ParamSpec*>> blocks;
    if (o_.group) {
      for (const auto& g : groups_) {
        std::vector<const ParamSpec*> block;
        for (const auto& name : g)  // sorted by name, like Optuna
          if (const ParamSpec* p = space.find(name); p && !single(p->dist)) block.push_back(p);
        if (!block.empty()) blocks.push_back(std::move(block));
      }
    } else {
      std::vector<const ParamSpec*> block;
      for (const auto& p : space.params())
        if (auto c = count_.find(p.name);
            c != count_.end() && c->second == static_cast<int64_t>(obs_.size()) && !single(p.dist))
          block.push_back(&p);
      std::sort(block.begin(), block.end(),
                [](const ParamSpec* a, const ParamSpec* b) { return a->name < b->name; });
      if (!block.empty()) blocks.push_back(std::move(block));
    }
    for (const auto& block : blocks) {
      const Params part = sample_group(block, s, liars, rng);
      joint.insert(part.begin(), part.end());
    }
  }
  for (const auto& p : space.params()) {
    if (!space.active(p, out)) continue;
    if (single(p.dist)) {
      out[p.name] = p.dist.low;
    } else if (auto it = joint.find(p.name); it != joint.end()) {
      out[p.name] = it->second;
    } else {
      out[p.name] = sample_group({&p}, s, liars, rng).at(p.name);
    }
  }
  return out;
}

}  // namespace ftune::hpo
