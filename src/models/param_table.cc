// Flat parameter layout bookkeeping.
#include "models/param_table.h"

#include <fmt/format.h>

#include <cctype>

#include "core/error.h"

namespace ftune {

bool ParamTable::default_decay(const std::string& name) {
  // transformers' Trainer.get_decay_parameter_names: no decay for names matching (lower case)
  // "bias", "layernorm", "rmsnorm", "(^|\.)norm($|\.)" or "_norm($|\.)".
  std::string n = name;
  for (char& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  const auto component = [&](const std::string& suffix) {  // suffix ending a name part
    for (size_t at = n.find(suffix); at != std::string::npos; at = n.find(suffix, at + 1)) {
      const size_t end = at + suffix.size();
      if (end == n.size() || n[end] == '.') {
        if (suffix[0] == '_') return true;
        if (at == 0 || n[at - 1] == '.') return true;
      }
    }
    return false;
  };
  return !has("bias") && !has("layernorm") && !has("rmsnorm") && !component("norm") &&
         !component("_norm");
}

const ParamSpec& ParamTable::add(std::string name, Shape shape) {
  FTUNE_ASSERT(!index_.count(name), "duplicate parameter {}", name);
  ParamSpec spec;
  spec.decay = default_decay(name);
  spec.name = std::move(name);
  spec.shape = shape;
  spec.offset = total_;
  total_ += shape.numel();
  index_.emplace(spec.name, specs_.size());
  specs_.push_back(std::move(spec));
  return specs_.back();
}

const ParamSpec* ParamTable::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &specs_[it->second];
}

const ParamSpec& ParamTable::at(const std::string& name) const {
  const ParamSpec* s = find(name);
  FTUNE_ASSERT(s != nullptr, "no parameter named {}", name);
  return *s;
}

TensorView ParamTable::slice(TensorView flat, const ParamSpec& spec) {
  return flat.flat_range(spec.offset, spec.shape.numel()).reshape(spec.shape);
}

TensorView ParamTable::span(TensorView flat, const std::string& first, Shape shape) const {
  return flat.flat_range(at(first).offset, shape.numel()).reshape(shape);
}

}  // namespace ftune
