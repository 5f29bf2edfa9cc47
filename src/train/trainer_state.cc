// Reading trainer_state.json with a typed error for every field (see trainer_state.h).
#include "train/trainer_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "io/json_file.h"

namespace ftune {
namespace {

int64_t count(const nlohmann::json& j, const char* key, const std::string& path, int64_t min = 0) {
  const int64_t v = io::get_int(j, key, path);
  if (v < min)
    throw InputError(fmt::format("{}: key '{}' must be at least {}, got {}", path, key, min, v));
  return v;
}

double seconds(const nlohmann::json& j, const char* key, const std::string& path) {
  const double v = io::get_float(j, key, path);
  if (!(v >= 0) || !std::isfinite(v))
    throw InputError(
        fmt::format("{}: key '{}' must be a finite number >= 0, got {}", path, key, v));
  return v;
}

nlohmann::json object_or_null(const nlohmann::json& j, const char* key, const std::string& path) {
  const auto it = j.find(key);
  if (it == j.end()) throw InputError(fmt::format("{}: missing required key '{}'", path, key));
  if (!it->is_null() && !it->is_object())
    throw InputError(fmt::format("{}: key '{}' must be an object or null, got {}", path, key,
                                 io::json_type_name(*it)));
  return *it;
}

}  // namespace

TrainerState parse_trainer_state(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object())
    throw InputError(
        fmt::format("{}: expected a JSON object, got {}", path, io::json_type_name(j)));
  const int64_t version = io::get_optional_int(j, "version", path).value_or(0);
  if (version != TrainerState::kVersion)
    throw InputError(fmt::format(
        "{} was written by an earlier ftune whose batching counted micro-batches (version {}, "
        "expected {}); start a new run",
        path, version, TrainerState::kVersion));
  TrainerState s;
  s.step = count(j, "step", path);
  s.micro_batch = count(j, "micro_batch", path, 1);
  if (j.contains("micro_tokens")) s.micro_tokens = count(j, "micro_tokens", path);
  s.micro_batches = count(j, "micro_batches", path);
  s.optimizer_steps = count(j, "optimizer_steps", path);
  s.samples = count(j, "samples", path);
  s.real_tokens = count(j, "real_tokens", path);
  s.skipped_steps = count(j, "skipped_steps", path);
  s.nonfinite_in_row = count(j, "nonfinite_in_row", path);
  if (const auto scale = io::get_optional_float(j, "loss_scale", path)) {
    if (!(*scale > 0) || !std::isfinite(static_cast<float>(*scale)))
      throw InputError(fmt::format("{}: key 'loss_scale' must be a positive finite number, got {}",
                                   path, *scale));
    s.loss_scale = static_cast<float>(*scale);
    s.loss_scale_good_steps = count(j, "loss_scale_good_steps", path);
  }
  s.train_seconds = seconds(j, "train_seconds", path);
  s.input_wait_seconds = seconds(j, "input_wait_seconds", path);
  s.best_eval = object_or_null(j, "best_eval", path);
  s.last_eval = object_or_null(j, "last_eval", path);
  s.early_stopping = object_or_null(j, "early_stopping", path);
  if (!s.early_stopping.is_object())
    throw InputError(fmt::format("{}: key 'early_stopping' must be an object", path));
  s.gradient_checkpointing = io::get_bool(j, "gradient_checkpointing", path);
  s.threads = count(j, "threads", path, 1);
  s.ranks = j.contains("ranks") ? count(j, "ranks", path, 1) : 1;
  s.fingerprints = object_or_null(j, "fingerprints", path);
  for (const char* key : {"model", "tokenizer", "data", "config"})
    if (!s.fingerprints.is_object() || !s.fingerprints.contains(key))
      throw InputError(fmt::format("{}: key 'fingerprints' must hold '{}'", path, key));
  if (s.fingerprints.contains("labels")) {  // the label names (runs from before labels: absent)
    const nlohmann::json& labels = s.fingerprints["labels"];
    if (!labels.is_array() ||
        !std::all_of(labels.begin(), labels.end(), [](const auto& l) { return l.is_string(); }))
      throw InputError(fmt::format(
          "{}: key 'fingerprints.labels' must be a list of label names", path));
  }
  if (j.contains("window")) {
    const nlohmann::json& w = j["window"];
    if (!w.is_object())
      throw InputError(fmt::format("{}: key 'window' must be an object, got {}", path,
                                   io::json_type_name(w)));
    const std::string where = path + " (window)";
    TrainerState::Window win;
    win.steps = count(w, "steps", where);
    win.samples = count(w, "samples", where);
    win.real_tokens = count(w, "real_tokens", where);
    const std::optional<double> loss = io::get_optional_float(w, "loss_sum", where);
    if (!loss || !std::isfinite(*loss))
      throw InputError(fmt::format("{}: key 'window.loss_sum' must be a finite number", path));
    win.loss_sum = *loss;
    if (w.contains("seconds")) win.seconds = seconds(w, "seconds", where);
    s.window = win;
  }
  if (j.contains("stopped_by")) {
    if (!j["stopped_by"].is_string())
      throw InputError(fmt::format("{}: key 'stopped_by' must be a string, got {}", path,
                                   io::json_type_name(j["stopped_by"])));
    s.stopped_by = j["stopped_by"].get<std::string>();
  }
  return s;
}

TrainerState read_trainer_state(const std::string& path) {
  return parse_trainer_state(io::read_json_file(path), path);
}

}  // namespace ftune
