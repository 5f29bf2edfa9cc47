// Grid enumeration and the choice of the next unvisited point.
#include "hpo/grid_sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"

namespace ftune::hpo {
namespace {

std::vector<double> values_of(const ParamSpec& p, const std::string& where) {
  const Distribution& d = p.dist;
  std::vector<double> out;
  if (d.kind == Distribution::Kind::Categorical) {
    for (size_t i = 0; i < d.choices.size(); ++i) out.push_back(static_cast<double>(i));
    return out;
  }
  if (d.kind == Distribution::Kind::Float && d.step == 0) {
    throw InputError(fmt::format(
        "{}: grid search needs a step for float parameter '{}' (or make it categorical)", where,
        p.name));
  }
  const double step = d.step > 0 ? d.step : 1;
  const auto n = static_cast<int64_t>(std::floor((d.high - d.low) / step + 1e-9)) + 1;
  if (n > 10'000'000)
    throw InputError(fmt::format("{}: grid of '{}' has {} values", where, p.name, n));
  for (int64_t k = 0; k < n; ++k)
    out.push_back(std::min(d.low + static_cast<double>(k) * step, d.high));
  return out;
}

}  // namespace

std::vector<Params> GridSampler::grid(const SearchSpace& space, const std::string& where) {
  std::vector<const ParamSpec*> ps;
  for (const auto& p : space.params()) ps.push_back(&p);
  std::sort(ps.begin(), ps.end(), [](auto* a, auto* b) { return a->name < b->name; });
  std::vector<std::vector<double>> values;
  double total = 1;
  for (const ParamSpec* p : ps) {
    values.push_back(values_of(*p, where));
    total *= static_cast<double>(values.back().size());
  }
  if (total > 10'000'000)
    throw InputError(fmt::format("{}: the grid has {} points (at most 10 million)", where, total));
  std::vector<Params> out;
  std::set<Params> seen;
  std::vector<size_t> idx(ps.size(), 0);
  for (bool more = true; more;) {
    Params full;
    for (size_t j = 0; j < ps.size(); ++j) full[ps[j]->name] = values[j][idx[j]];
    Params active;  // in space order, so conditions see their parents
    for (const auto& p : space.params())
      if (space.active(p, active)) active[p.name] = full.at(p.name);
    if (seen.insert(active).second) out.push_back(active);
    more = false;
    for (size_t j = ps.size(); j-- > 0;) {  // odometer, last parameter fastest
      if (++idx[j] < values[j].size()) {
        more = true;
        break;
      }
      idx[j] = 0;
    }
  }
  return out;
}

void GridSampler::observe(const Trial& finished) {
  visited_.push_back(finished.params);
}

Params GridSampler::sample(const SearchSpace& space, int64_t number,
                           const std::vector<Trial>& running) {
  const std::vector<Params> points = grid(space);
  std::set<Params> taken(visited_.begin(), visited_.end());
  for (const auto& t : running) taken.insert(t.params);
  for (const auto& p : points)
    if (!taken.count(p)) return p;
  return points[static_cast<size_t>(number) % points.size()];
}

}  // namespace ftune::hpo
