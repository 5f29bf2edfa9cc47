// Model-directory resolution (single file, sharded index, refused pickle formats) and the
// validation of sharded indexes against their shards.
#include "io/checkpoint_reader.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "io/json_file.h"

namespace ftune::io {
namespace fs = std::filesystem;
namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// What a directory without safetensors weights holds instead, for the error message.
[[noreturn]] void no_weights(const std::string& dir) {
  std::vector<std::string> bins, safetensors, others;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("pytorch_model", 0) == 0 &&
        (ends_with(name, ".bin") || ends_with(name, ".bin.index.json")))
      bins.push_back(name);
    else if (ends_with(name, ".safetensors") || ends_with(name, ".safetensors.index.json"))
      safetensors.push_back(name);
    else if (name == "tf_model.h5" || name == "flax_model.msgpack" || ends_with(name, ".ckpt") ||
             ends_with(name, ".pt") || ends_with(name, ".pth"))
      others.push_back(name);
  }
  std::sort(bins.begin(), bins.end());
  std::sort(safetensors.begin(), safetensors.end());
  if (!bins.empty()) {
    const bool single = std::find(bins.begin(), bins.end(), "pytorch_model.bin") != bins.end();
    std::string how = fmt::format(
        "  python -c \"from transformers import AutoModelForSequenceClassification as M; "
        "M.from_pretrained('{0}').save_pretrained('{0}', safe_serialization=True)\"",
        dir);
    if (single) {
      how = fmt::format(
                "  python -c \"import torch; from safetensors.torch import save_file; "
                "sd = torch.load('{0}/pytorch_model.bin', map_location='cpu', weights_only=True); "
                "save_file({{k: v.clone().contiguous() for k, v in sd.items()}}, "
                "'{0}/model.safetensors', metadata={{'format': 'pt'}})\"\n"
                "(keeps every tensor as is), or through transformers (use the model class the "
                "checkpoint was trained with):\n",
                dir) +
            how;
    }
    throw InputError(fmt::format(
        "{} holds a PyTorch pickle checkpoint ({}), which ftune does not read: only safetensors "
        "weights (model.safetensors or model.safetensors.index.json) are supported, since "
        "unpickling can run arbitrary code. Convert it once with\n{}",
        dir, fmt::join(bins, ", "), how));
  }
  std::string found;
  if (!safetensors.empty())
    found = fmt::format(" (found {}; a PEFT adapter or another name is not a full model)",
                        fmt::join(safetensors, ", "));
  else if (!others.empty())
    found = fmt::format(" (found {}, which ftune does not read)", fmt::join(others, ", "));
  throw InputError(fmt::format("no model weights in {}: expected {} or {}{}", dir, kSingleFile,
                               kIndexFile, found));
}

// Shard names come from a file: keep them inside the model directory.
bool is_plain_relative(const std::string& name) {
  if (name.empty() || name.front() == '/') return false;
  for (const auto& part : fs::path(name))
    if (part == "..") return false;
  return true;
}

}  // namespace

CheckpointReader CheckpointReader::open(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) throw InputError(fmt::format("model directory {} does not exist", path));

  CheckpointReader r;
  std::string index_path;
  std::string single_path;
  if (fs::is_directory(st)) {
    r.dir_ = path;
    const fs::path dir(path);
    if (is_file(dir / kSingleFile))
      single_path = (dir / kSingleFile).string();
    else if (is_file(dir / kIndexFile))
      index_path = (dir / kIndexFile).string();
    else
      no_weights(path);
  } else {
    const fs::path parent = fs::path(path).parent_path();
    r.dir_ = parent.empty() ? std::string(".") : parent.string();
    if (ends_with(path, ".safetensors"))
      single_path = path;
    else if (ends_with(path, ".safetensors.index.json"))
      index_path = path;
    else
      throw InputError(fmt::format("{} is a file; expected a model directory holding {} or {}",
                                   path, kSingleFile, kIndexFile));
  }

  if (!single_path.empty()) {
    r.weights_path_ = single_path;
    r.files_.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(single_path)));
    for (const SafetensorsEntry& e : r.files_[0]->entries())
      r.slots_.emplace(e.name, Slot{r.files_[0].get(), &e});
  } else {
    r.weights_path_ = index_path;
    r.sharded_ = true;
    const nlohmann::json index = read_json_file(index_path);
    if (!index.is_object())
      throw InputError(fmt::format("{}: expected a JSON object with a 'weight_map', got {}",
                                   index_path, json_type_name(index)));
    const auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object())
      throw InputError(
          fmt::format("{}: 'weight_map' must be an object mapping tensor names to "
                      "shard files, got {}",
                      index_path, wm == index.end() ? "nothing" : json_type_name(*wm)));
    if (wm->empty()) throw InputError(fmt::format("{}: 'weight_map' lists no tensors", index_path));

    // Every shard once, each validated; the first tensor mapped to a shard names it in errors.
    std::map<std::string, std::string> first_tensor_of;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it->is_string())
        throw InputError(fmt::format("{}: weight_map entry '{}' must name a shard file, got {}",
                                     index_path, it.key(), json_type_name(*it)));
      const std::string& shard = it->get_ref<const std::string&>();
      if (!is_plain_relative(shard))
        throw InputError(fmt::format("{}: tensor '{}' maps to '{}', which is not a file inside {}",
                                     index_path, it.key(), shard, r.dir_));
      first_tensor_of.emplace(shard, it.key());
    }
    std::map<std::string, const SafetensorsFile*> shard_files;
    for (const auto& [shard, tensor] : first_tensor_of) {
      const fs::path shard_path = fs::path(r.dir_) / shard;
      if (!is_file(shard_path))
        throw InputError(fmt::format("{}: tensor '{}' is in shard '{}', but {} does not exist",
                                     index_path, tensor, shard, shard_path.string()));
      r.files_.push_back(
          std::make_unique<SafetensorsFile>(SafetensorsFile::open(shard_path.string())));
      shard_files.emplace(shard, r.files_.back().get());
    }
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      const std::string& shard = it->get_ref<const std::string&>();
      const SafetensorsFile* file = shard_files.at(shard);
      const SafetensorsEntry* e = file->find(it.key());
      if (!e)
        throw InputError(
            fmt::format("{}: tensor '{}' is mapped to shard '{}', but {} does not "
                        "contain it",
                        index_path, it.key(), shard, file->path()));
      r.slots_.emplace(it.key(), Slot{file, e});
    }
  }
  r.names_.reserve(r.slots_.size());
  for (const auto& [name, slot] : r.slots_) r.names_.push_back(name);
  return r;
}

std::vector<std::string> CheckpointReader::shard_paths() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

const SafetensorsEntry* CheckpointReader::find(std::string_view name) const {
  const auto it = slots_.find(name);
  return it == slots_.end() ? nullptr : it->second.entry;
}

const CheckpointReader::Slot& CheckpointReader::slot(std::string_view name) const {
  const auto it = slots_.find(name);
  if (it == slots_.end())
    throw InputError(fmt::format("{}: no tensor named '{}' (the checkpoint holds {} tensors)",
                                 weights_path_, name, slots_.size()));
  return it->second;
}

const SafetensorsEntry& CheckpointReader::at(std::string_view name) const {
  return *slot(name).entry;
}

const std::string& CheckpointReader::file_of(std::string_view name) const {
  return slot(name).file->path();
}

const std::map<std::string, std::string>& CheckpointReader::metadata() const {
  static const std::map<std::string, std::string> kEmpty;
  return files_.empty() ? kEmpty : files_.front()->metadata();
}

void CheckpointReader::read_into(std::string_view name, TensorView dst) const {
  const Slot& s = slot(name);
  read_entry_into(*s.entry, s.file->path(), dst);
}

HostTensor CheckpointReader::read(std::string_view name, std::optional<DType> as) const {
  return slot(name).file->read(name, as);
}

}  // namespace ftune::io
