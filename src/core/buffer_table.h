// One list of named buffers drives both planning and binding (llm.c's fill_in_activation_sizes and
// malloc_and_point_activations): a component lists each buffer once — name, dtype, shape and the
// views that point into it — and the same table is added to an ArenaPlan and later bound to the
// Arena, so sizes and pointers cannot drift apart. One buffer may back several views (layers that
// share an activation slot).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "core/arena.h"

namespace ftune {

class BufferTable {
 public:
  // A buffer and (optionally) the view it binds.
  void add(std::string name, DType dtype, Shape shape, TensorView* view = nullptr);
  // Another view bound to a buffer already in the table (or null: nothing to bind).
  void also(const std::string& name, TensorView* view);
  bool contains(const std::string& name) const { return index_.count(name) > 0; }

  void plan(ArenaPlan& plan) const;  // adds every buffer, in table order
  void bind(const Arena& arena) const;  // points every view at its buffer

 private:
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    std::vector<TensorView*> views;
  };
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace ftune
