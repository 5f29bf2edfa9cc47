// Buffer tables: plan and bind from one list (see buffer_table.h).
#include "core/buffer_table.h"

#include "core/error.h"

namespace ftune {

void BufferTable::add(std::string name, DType dtype, Shape shape, TensorView* view) {
  FTUNE_ASSERT(!index_.count(name), "buffer table: '{}' added twice", name);
  index_.emplace(name, entries_.size());
  entries_.push_back(Entry{std::move(name), dtype, shape, {}});
  if (view) entries_.back().views.push_back(view);
}

void BufferTable::also(const std::string& name, TensorView* view) {
  const auto it = index_.find(name);
  FTUNE_ASSERT(it != index_.end(), "buffer table: no buffer '{}'", name);
  if (view) entries_[it->second].views.push_back(view);
}

void BufferTable::plan(ArenaPlan& plan) const {
  for (const Entry& e : entries_) plan.add(e.name, e.dtype, e.shape);
}

void BufferTable::bind(const Arena& arena) const {
  for (const Entry& e : entries_) {
    const TensorView v = arena.view(e.name);
    for (TensorView* view : e.views) *view = v;
  }
}

}  // namespace ftune
