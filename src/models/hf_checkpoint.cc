// HF checkpoint name resolution, head initialisation and saving (see hf_checkpoint.h).
#include "models/hf_checkpoint.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <set>

#include "core/memory.h"
#include "io/checkpoint_reader.h"
#include "io/json_file.h"
#include "io/safetensors.h"

namespace ftune {
namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

bool shape_matches(const io::SafetensorsEntry& e, const Shape& shape) {
  if (static_cast<int>(e.shape.size()) != shape.rank()) return false;
  for (int i = 0; i < shape.rank(); ++i)
    if (e.shape[i] != shape[i]) return false;
  return true;
}

bool is_float_storage(io::SafetensorsDtype d) {
  return d == io::SafetensorsDtype::F32 || d == io::SafetensorsDtype::F16 ||
         d == io::SafetensorsDtype::BF16 || d == io::SafetensorsDtype::F64;
}

}  // namespace

std::string model_config_path(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  if (!std::filesystem::is_directory(dir))
    throw InputError(fmt::format("model directory '{}' does not exist", dir));
  if (!std::filesystem::exists(path))
    throw InputError(
        fmt::format("{}: missing (a Hugging Face model directory needs config.json)", path));
  return path;
}

ModelSpec load_model_spec(const std::string& dir, const LoadOptions& options) {
  const std::string path = model_config_path(dir);
  const ModelSpec spec = model_spec_from_json(io::read_json_file(path), path);
  if (options.causal_lm) {
    if (options.labels || options.num_labels)
      throw InputError(fmt::format("{}: a causal LM has no labels (model.labels / num_labels do "
                                   "not apply to model.task causal_lm)", path));
    return spec.as_causal_lm();
  }
  if (options.labels) return spec.with_labels(*options.labels);
  if (options.num_labels) return spec.with_num_labels(*options.num_labels);
  return spec;
}

LoadReport load_model_weights(SequenceClassifier& model, const std::string& dir,
                              const LoadOptions& options) {
  const ModelInfo& config = model.config();
  const Backbone& family = model.spec().backbone();
  const io::CheckpointReader ckpt = io::CheckpointReader::open(dir);
  LoadReport report;
  report.weights_path = ckpt.weights_path();
  std::set<std::string> used, dtypes;
  std::vector<std::string> missing_encoder;
  std::mt19937_64 rng(options.init_seed);

  for (const ParamSpec& spec : model.params().specs()) {
    const io::SafetensorsEntry* entry = nullptr;
    for (const std::string& name : family.checkpoint_names(spec.name))
      if ((entry = ckpt.find(name))) break;
    const bool is_head = family.may_initialise(spec.name);
    // Only the output layer's size follows the labels; the pooler (BERT) or the head's dense
    // layer (RoBERTa) is hidden x hidden, so a shape mismatch there is a wrong file, not a new
    // label set, and is refused rather than re-initialised.
    const bool per_label = family.sized_by_labels(spec.name);
    const TensorView dst = model.param(spec.name);
    if (entry && !shape_matches(*entry, spec.shape)) {
      if (per_label && options.reinit_mismatched_head) {
        used.insert(entry->name);
        entry = nullptr;  // replaced by a fresh head below
      } else {
        throw InputError(fmt::format(
            "{}: tensor '{}' has shape {}, but the model expects {}{}", ckpt.file_of(entry->name),
            entry->name, shape_str(entry->shape), spec.shape.str(),
            per_label ? fmt::format(" ({} labels); set num_labels to match the checkpoint or "
                                    "allow reinitialising the classification head",
                                    config.num_labels())
                      : ""));
      }
    }
    if (!entry && config.causal_lm && spec.name == config.lm_head && spec.name == "lm_head.weight")
      throw InputError(fmt::format(
          "{}: tensor 'lm_head.weight' is missing and {}/config.json has tie_word_embeddings "
          "false: a causal LM needs its LM head (a *ForCausalLM checkpoint, or tied embeddings)",
          ckpt.weights_path(), dir));
    if (!entry) {
      if (!is_head) {
        missing_encoder.push_back(spec.name);
        continue;
      }
      family.init_param(spec, dst, rng);
      report.initialised.push_back(spec.name);
      continue;
    }
    if (!is_float_storage(entry->dtype))
      throw InputError(fmt::format(
          "{}: tensor '{}' is stored as {}, expected a float type (F32, F16, BF16)",
          ckpt.file_of(entry->name), entry->name, io::safetensors_dtype_name(entry->dtype)));
    io::check_finite(*entry, ckpt.file_of(entry->name));  // NaN / Inf weights: refused
    ckpt.read_into(entry->name, dst);
    used.insert(entry->name);
    dtypes.insert(std::string(io::safetensors_dtype_name(entry->dtype)));
  }
  if (!missing_encoder.empty()) {
    std::string list;
    for (size_t i = 0; i < missing_encoder.size() && i < 5; ++i)
      list += "\n  " + missing_encoder[i];
    throw InputError(fmt::format("{}: {} encoder weights of this {} model are missing, e.g.:{}{}",
                                 ckpt.weights_path(), missing_encoder.size(), config.model_type,
                                 list, missing_encoder.size() > 5 ? "\n  ..." : ""));
  }
  model.frozen_weights_changed();
  for (const std::string& name : ckpt.names())
    if (!used.count(name)) report.unexpected.push_back(name);
  report.stored_dtypes.assign(dtypes.begin(), dtypes.end());
  if (!report.initialised.empty() && options.warn_initialised)
    spdlog::warn("{}: newly initialised (not in the checkpoint): {}", dir,
                 fmt::join(report.initialised, ", "));
  if (!report.unexpected.empty())
    spdlog::info("{}: {} checkpoint tensors not used by {} (e.g. {})", dir,
                 report.unexpected.size(), config.architecture, report.unexpected.front());
  return report;
}

void save_model(const SequenceClassifier& model, const std::string& dir) { save_model(model, dir, {}); }

void save_model(const SequenceClassifier& model, const std::string& dir,
                const std::map<std::string, TensorView>& values) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw InputError(fmt::format("cannot create model directory '{}': {}", dir, ec.message()));
  std::vector<io::SafetensorsTensor> tensors;
  for (const ParamSpec& spec : model.params().specs()) {
    const auto it = values.find(spec.name);
    const TensorView v = it != values.end() ? it->second : model.param(spec.name);
    tensors.push_back({spec.name, v, DType::F32});  // 16-bit ones widened
  }
  io::write_safetensors((std::filesystem::path(dir) / "model.safetensors").string(), tensors);
  nlohmann::json config = model.spec().to_json();
  if (config.contains("torch_dtype")) config["torch_dtype"] = "float32";
  config["dtype"] = "float32";
  io::write_json_atomic((std::filesystem::path(dir) / "config.json").string(), config);
}

}  // namespace ftune
