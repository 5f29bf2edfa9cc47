// Parameter views and the ModelSpec handle (see backbone.h).
#include "models/backbone.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "models/config_fields.h"

namespace ftune {

TensorView ParamViews::get(const std::string& name) const {
  const ParamSpec* spec = table ? table->find(name) : nullptr;
  const TensorView v = spec ? span(name, spec->shape) : TensorView();
  return v.defined() || !next ? v : next->get(name);
}

TensorView ParamViews::span(const std::string& first, Shape shape) const {
  const ParamSpec* spec = table && flat.defined() ? table->find(first) : nullptr;
  const int64_t at = spec ? spec->offset - base : -1, n = shape.numel();
  if (spec && at >= 0 && at + n <= flat.numel() && spec->offset + n <= table->total())
    return flat.flat_range(at, n).reshape(shape);
  return next ? next->span(first, shape) : TensorView();
}

DropoutRows dropout_rows(const DropoutPlan& d, const TokenInputs& in) {
  if (!in.packed()) return DropoutRows{d.row0, in.T, d.stream_seq};
  DropoutRows r{d.row0, 1, std::max(d.stream_seq, in.max_len)};
  r.cu_seqlens = in.cu_seqlens.data_as<int32_t>();
  r.host_cu_seqlens = in.host_cu_seqlens;
  r.rows = in.B;
  return r;
}

const Backbone& ModelSpec::backbone() const {
  FTUNE_ASSERT(b_ != nullptr, "ModelSpec without a model");
  return *b_;
}

ModelSpec ModelSpec::with_labels(std::vector<std::string> labels) const {
  if (labels.empty()) throw InputError("a classifier needs at least one label");
  return ModelSpec(backbone().with_labels(std::move(labels)));
}

ModelSpec ModelSpec::with_num_labels(int64_t n) const {
  return with_labels(numbered_labels(n));  // InputError for n <= 0
}

ModelSpec ModelSpec::with_dropout(const DropoutRates& rates) const {
  ModelSpec out(backbone().with_dropout(rates));
  out.problem_type_ = problem_type_;
  return out;
}

std::shared_ptr<const Backbone> Backbone::as_causal_lm() const {
  throw InputError(fmt::format("{} (model_type {}) has no causal-LM form in ftune: model.task "
                               "causal_lm needs a decoder (llama, mistral, qwen2, qwen3, gemma, "
                               "gemma2, gemma3_text)",
                               info().architecture, info().model_type));
}

ModelSpec ModelSpec::as_causal_lm() const {
  if (info().causal_lm) return *this;
  return ModelSpec(backbone().as_causal_lm());
}

ModelSpec ModelSpec::with_problem_type(std::string problem_type) const {
  ModelSpec out = *this;
  out.problem_type_ = std::move(problem_type);
  return out;
}

std::string ModelSpec::problem_type() const {
  if (problem_type_) return *problem_type_;
  const nlohmann::json j = backbone().config_json();
  const auto it = j.find("problem_type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

nlohmann::json ModelSpec::to_json() const {
  nlohmann::json j = backbone().config_json();
  if (problem_type_) {
    if (problem_type_->empty())
      j.erase("problem_type");
    else
      j["problem_type"] = *problem_type_;
  }
  return j;
}

}  // namespace ftune
