// PEFT adapter files and adapter merging (see peft_adapter.h).
#include "models/peft_adapter.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/memory.h"
#include "io/checkpoint_reader.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/adapters.h"
#include "models/hf_checkpoint.h"

namespace ftune {
namespace {

constexpr const char* kPrefix = "base_model.model.";

std::string config_path(const std::string& dir) {
  return (std::filesystem::path(dir) / "adapter_config.json").string();
}

std::string weights_path(const std::string& dir) {
  return (std::filesystem::path(dir) / "adapter_model.safetensors").string();
}

bool is_null_or_empty(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return true;
  if (j[key].is_object() || j[key].is_array()) return j[key].empty();
  return false;
}

HostTensor to_host(const TensorView& v) {
  HostTensor h(DType::F32, v.shape);
  copy(h.view(), v);
  return h;
}

}  // namespace

AdapterConfig read_peft_adapter_config(const std::string& dir) {
  const std::string path = config_path(dir);
  const nlohmann::json j = io::read_json_file(path);
  const std::string type = io::get_string(j, "peft_type", path);
  if (type != "LORA")
    throw InputError(
        fmt::format("{}: peft_type '{}' is not supported (expected LORA)", path, type));
  const auto task = io::get_optional_string(j, "task_type", path);
  if (task && *task != "SEQ_CLS" && *task != "CAUSAL_LM")
    throw InputError(fmt::format(
        "{}: task_type '{}' is not supported (expected SEQ_CLS or CAUSAL_LM)", path, *task));
  if (const auto bias = io::get_optional_string(j, "bias", path); bias && *bias != "none")
    throw InputError(fmt::format("{}: bias '{}' is not supported (expected none)", path, *bias));
  for (const char* key : {"fan_in_fan_out", "lora_bias"})
    if (io::get_optional_bool(j, key, path).value_or(false))
      throw InputError(fmt::format("{}: {} true is not supported", path, key));
  for (const char* key : {"rank_pattern", "alpha_pattern", "layers_to_transform",
                          "layer_replication", "exclude_modules", "target_parameters"})
    if (!is_null_or_empty(j, key))
      throw InputError(fmt::format("{}: {} is not supported (expected null or empty)", path, key));
  AdapterConfig c;
  c.method = io::get_optional_bool(j, "use_dora", path).value_or(false) ? PeftMethod::Dora
                                                                        : PeftMethod::Lora;
  c.r = io::get_int(j, "r", path);
  c.alpha = io::get_float(j, "lora_alpha", path);
  c.dropout = io::get_optional_float(j, "lora_dropout", path).value_or(0.0);
  c.use_rslora = io::get_optional_bool(j, "use_rslora", path).value_or(false);
  if (c.r <= 0 || c.r > INT32_MAX)
    throw InputError(fmt::format("{}: r must be in [1, {}], got {}", path, INT32_MAX, c.r));
  if (!(c.alpha > 0 && c.alpha <= FLT_MAX))  // the scaling is a float
    throw InputError(
        fmt::format("{}: lora_alpha must be a finite number > 0, got {}", path, c.alpha));
  if (!(c.dropout >= 0 && c.dropout < 1))
    throw InputError(fmt::format("{}: lora_dropout must be in [0, 1), got {}", path, c.dropout));
  const nlohmann::json& t = j.contains("target_modules") ? j["target_modules"] : nlohmann::json();
  if (t.is_string()) {
    if (is_all_linear(t.get<std::string>()))  // PEFT lowercases the string
      c.target_modules = {"all-linear"};
    else {
      c.target_modules.clear();
      c.target_regex = t.get<std::string>();
      validate_module_regex(c.target_regex, path + ": target_modules");
    }
  } else if (t.is_array() && !t.empty()) {
    c.target_modules.clear();
    for (const auto& m : t) {
      if (!m.is_string())
        throw InputError(fmt::format("{}: target_modules must hold strings", path));
      c.target_modules.push_back(m.get<std::string>());
    }
  } else {
    throw InputError(fmt::format("{}: target_modules must be a list of names or a string", path));
  }
  c.modules_to_save = {"classifier"};
  if (j.contains("modules_to_save") && j["modules_to_save"].is_array())
    for (const auto& m : j["modules_to_save"])
      if (m.is_string() && m.get<std::string>() == "pooler") c.modules_to_save.push_back("pooler");
  return c;
}

void load_peft_adapter(SequenceClassifier& model, const std::string& dir) {
  // A classifier's adapter (SEQ_CLS) on a causal LM or the other way round: the same tensors may
  // fit, but it was trained for another head and loss.
  if (std::filesystem::exists(config_path(dir))) {
    const std::string cfg = config_path(dir);
    const auto task = io::get_optional_string(io::read_json_file(cfg), "task_type", cfg);
    const std::string want = model.config().causal_lm ? "CAUSAL_LM" : "SEQ_CLS";
    if (task && *task != want)
      throw InputError(fmt::format("{}: task_type {} adapter on {} ({}): expected task_type {}",
                                   cfg, *task, model.config().architecture,
                                   model.config().causal_lm ? "a causal LM" : "a classifier",
                                   want));
  }
  const std::string path = weights_path(dir);
  const io::SafetensorsFile f = io::SafetensorsFile::open(path);
  std::set<std::string> used;
  for (const ParamSpec& spec : model.trainable_params().specs()) {
    const std::string key = kPrefix + spec.name;
    const io::SafetensorsEntry* e = f.find(key);
    if (!e)
      throw InputError(
          fmt::format("{}: tensor '{}' is missing (the adapter config targets it)", path, key));
    if (Shape(e->shape.begin(), e->shape.end()) != spec.shape)
      throw InputError(fmt::format("{}: tensor '{}' has shape {}, expected {}", path, key,
                                   e->shape_str(), spec.shape.str()));
    io::check_finite(*e, path);  // NaN / Inf in an adapter: refused, naming the tensor
    f.read_into(key, model.param(spec.name));
    used.insert(key);
  }
  // A tensor inside a module of the HF model that ftune does not run (listed by the family without
  // children and holding none of ftune's parameters: a multimodal Gemma 3's vision tower, whose
  // attention PEFT's q_proj / k_proj / v_proj also match) cannot change what ftune computes:
  // ignored, and named in a warning.
  const std::vector<ClassifierModule> modules = model.spec().backbone().modules();
  auto under = [](const std::string& name, const std::string& module) {
    return name.starts_with(module + ".");
  };
  auto not_run = [&](const std::string& key) {
    const std::string name = key.substr(std::string(kPrefix).size());
    for (const ClassifierModule& m : modules) {
      if (m.name.empty() || !under(name, m.name)) continue;
      const auto& specs = model.params().specs();
      if (std::none_of(modules.begin(), modules.end(),
                       [&](const ClassifierModule& c) { return under(c.name, m.name); }) &&
          std::none_of(specs.begin(), specs.end(),
                       [&](const ParamSpec& p) { return under(p.name, m.name); }))
        return true;
    }
    return false;
  };
  std::vector<std::string> ignored;
  for (const io::SafetensorsEntry& e : f.entries()) {
    if (used.count(e.name)) continue;
    if (e.name.starts_with(kPrefix) && not_run(e.name)) {
      ignored.push_back(e.name);
      continue;
    }
    throw InputError(fmt::format(
        "{}: tensor '{}' does not belong to an adapter or a saved module of this model as "
        "{}/adapter_config.json describes it (target_modules, modules_to_save)",
        path, e.name, dir));
  }
  if (!ignored.empty())
    spdlog::warn("{}: ignored {} tensors of modules {} does not run (text-only input never "
                 "reaches them): {}",
                 path, ignored.size(), model.config().architecture, fmt::join(ignored, ", "));
}

void save_peft_adapter(const SequenceClassifier& model, const std::string& dir,
                       const std::string& base_model) {
  const AdapterConfig& c = model.options().adapters;
  if (!c.enabled()) throw InputError("save_peft_adapter: the model has no adapters");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw InputError(fmt::format("cannot create adapter directory '{}': {}", dir, ec.message()));
  std::vector<io::SafetensorsTensor> tensors;
  std::set<std::string> modules;
  for (const ParamSpec& spec : model.trainable_params().specs()) {
    tensors.push_back({kPrefix + spec.name, model.param(spec.name), {}});
    for (const char* suffix : {".lora_A.weight"})
      if (spec.name.ends_with(suffix))
        modules.insert(spec.name.substr(0, spec.name.size() - std::string(suffix).size()));
  }
  io::write_safetensors(weights_path(dir), tensors);
  const nlohmann::json modules_to_save = model.spec().backbone().peft_modules_to_save(c);
  const nlohmann::json j = {
      {"peft_type", "LORA"},
      // A causal LM's adapter loads onto AutoModelForCausalLM (its lm_head frozen, nothing saved
      // whole); a classifier's onto AutoModelForSequenceClassification.
      {"task_type", model.config().causal_lm ? "CAUSAL_LM" : "SEQ_CLS"},
      {"base_model_name_or_path",
       base_model.empty() ? nlohmann::json() : nlohmann::json(base_model)},
      {"r", c.r},
      {"lora_alpha", c.alpha},
      {"lora_dropout", c.dropout},
      {"use_rslora", c.use_rslora},
      {"use_dora", c.dora()},
      {"target_modules", std::vector<std::string>(modules.begin(), modules.end())},
      {"modules_to_save", modules_to_save.empty() ? nlohmann::json() : modules_to_save},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"init_lora_weights", true},
      {"inference_mode", true},
      {"rank_pattern", nlohmann::json::object()},
      {"alpha_pattern", nlohmann::json::object()},
      {"layers_to_transform", nullptr},
      {"layers_pattern", nullptr},
      {"revision", nullptr},
      {"auto_mapping", nullptr},
      {"megatron_config", nullptr},
      {"megatron_core", "megatron.core"},
      {"loftq_config", nlohmann::json::object()},
      {"lora_bias", false},
      {"exclude_modules", nullptr},
      {"layer_replication", nullptr},
  };
  io::write_json_atomic(config_path(dir), j);
}

namespace {

// The adapted modules (PEFT names without the prefix), in table order.
std::vector<std::string> adapted_modules(const SequenceClassifier& model) {
  const std::string suffix = ".lora_A.weight";
  std::vector<std::string> out;
  for (const ParamSpec& spec : model.adapter_params().specs())
    if (spec.name.ends_with(suffix)) out.push_back(spec.name.substr(0, spec.name.size() - suffix.size()));
  return out;
}

// The largest magnitude a merged weight may reach: trained transformer weights stay within a few
// hundred; past this the adapter (or its lora_alpha) is broken.
constexpr double kMaxMergedWeight = 1e6;

// Folds module m's adapter into w, its frozen weight (out, in) in fp32 on the host.
void merge_into(const SequenceClassifier& model, const std::string& m, HostTensor& w) {
  const AdapterConfig& c = model.options().adapters;
  const double s = c.scaling();
  const HostTensor a = to_host(model.param(m + ".lora_A.weight"));
  const HostTensor b = to_host(model.param(m + ".lora_B.weight"));
  const int64_t OC = w.shape()[0], C = w.shape()[1], r = c.r;
  const float* A = a.data<float>();
  const float* B = b.data<float>();
  float* W = w.data<float>();
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t k = 0; k < C; ++k) {
      double delta = 0;
      for (int64_t j = 0; j < r; ++j) delta += double(B[o * r + j]) * A[j * C + k];
      W[o * C + k] = static_cast<float>(W[o * C + k] + s * delta);
    }
  if (c.dora()) {
    const HostTensor mag = to_host(model.param(m + ".lora_magnitude_vector"));
    for (int64_t o = 0; o < OC; ++o) {
      double sq = 0;
      for (int64_t k = 0; k < C; ++k) sq += double(W[o * C + k]) * W[o * C + k];
      const double factor = mag.data<float>()[o] / std::sqrt(sq);
      for (int64_t k = 0; k < C; ++k) W[o * C + k] = static_cast<float>(W[o * C + k] * factor);
    }
  }
  // A merge whose result is not finite, or far beyond any trained weight (lora_alpha 1e38 is a
  // finite float; W + s B A is then ~1e36), would save a model that computes nothing useful.
  for (int64_t i = 0; i < OC * C; ++i)
    if (!(std::fabs(W[i]) <= kMaxMergedWeight))
      throw InputError(fmt::format(
          "merging the adapter into {}.weight gives {} at element {} (lora_alpha {:g}, r {}, "
          "scaling {:g}): refused; the adapter's weights or its lora_alpha are wrong",
          m, std::isnan(W[i]) ? "NaN" : fmt::format("{:g}", W[i]), i, c.alpha, c.r, s));
}

// Module m's frozen weight merged in place: merged in fp32, rounded once when written back to a
// 16-bit storage (frozen_16bit()). Query / key / value are blocks of the stored tensors of
// those names.
void merge_in_place(const SequenceClassifier& model, const std::string& m) {
  const TensorView wv = model.param(m + ".weight");
  HostTensor w(DType::F32, wv.shape);
  convert_copy(w.view(), wv);
  merge_into(model, m, w);
  convert_copy(wv, w.view());
}

bool same_type(io::SafetensorsDtype stored, DType d) {
  return (stored == io::SafetensorsDtype::BF16 && d == DType::BF16) ||
         (stored == io::SafetensorsDtype::F16 && d == DType::F16) ||
         (stored == io::SafetensorsDtype::F32 && d == DType::F32);
}

}  // namespace

void merge_adapters(SequenceClassifier& model) {
  if (!model.options().adapters.enabled()) return;
  for (const std::string& m : adapted_modules(model)) merge_in_place(model, m);
  model.frozen_weights_changed();
}

void save_merged_model(SequenceClassifier& model, const std::string& base_dir,
                       const std::string& dir) {
  // The parameters the model stores in 16 bits that the checkpoint holds in another type: read
  // again from there in fp32 (the precision the user loaded).
  const io::CheckpointReader ckpt = io::CheckpointReader::open(base_dir);
  const Backbone& family = model.spec().backbone();
  std::map<std::string, HostTensor> full;
  for (const ParamSpec& spec : model.params().specs()) {
    const TensorView v = model.param(spec.name);
    if (v.dtype == DType::F32) continue;
    for (const std::string& name : family.checkpoint_names(spec.name)) {
      const io::SafetensorsEntry* e = ckpt.find(name);
      if (!e) continue;
      if (!same_type(e->dtype, v.dtype)) {
        HostTensor h(DType::F32, spec.shape);
        ckpt.read_into(e->name, h.view());
        full.emplace(spec.name, std::move(h));
      }
      break;
    }
  }
  if (model.options().adapters.enabled())
    for (const std::string& m : adapted_modules(model)) {
      const auto it = full.find(m + ".weight");
      if (it != full.end())
        merge_into(model, m, it->second);
      else
        merge_in_place(model, m);
    }
  model.frozen_weights_changed();
  std::map<std::string, TensorView> values;
  for (const auto& [name, h] : full) values.emplace(name, h.view());
  save_model(model, dir, values);
}

}  // namespace ftune
