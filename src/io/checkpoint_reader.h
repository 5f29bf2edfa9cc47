// The weights of a Hugging Face model directory, single-file (model.safetensors) or sharded
// (model.safetensors.index.json + model-0000k-of-0000n.safetensors), behind one lookup by tensor
// name. Each shard is mapped once; everything (the index, every shard header, every weight_map
// entry) is validated in open(), so a model loader meets no surprises half-way through a load.
// PyTorch pickle checkpoints (pytorch_model.bin) are refused with the command that converts them.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.h"

namespace ftune::io {

class CheckpointReader {
 public:
  // `path` is a model directory, or directly a .safetensors file or a .safetensors.index.json.
  // As transformers does, a directory's model.safetensors wins over an index next to it.
  static CheckpointReader open(const std::string& path);

  const std::string& dir() const { return dir_; }
  // model.safetensors, or the index file for a sharded checkpoint.
  const std::string& weights_path() const { return weights_path_; }
  bool sharded() const { return sharded_; }
  std::vector<std::string> shard_paths() const;

  const std::vector<std::string>& names() const { return names_; }  // sorted
  const SafetensorsEntry* find(std::string_view name) const;        // nullptr when absent
  const SafetensorsEntry& at(std::string_view name) const;          // InputError when absent
  // Path of the file holding `name` (InputError when absent).
  const std::string& file_of(std::string_view name) const;
  // The __metadata__ of model.safetensors (of the first shard when sharded).
  const std::map<std::string, std::string>& metadata() const;

  // See SafetensorsFile::read_into / read.
  void read_into(std::string_view name, TensorView dst) const;
  HostTensor read(std::string_view name, std::optional<DType> as = std::nullopt) const;

 private:
  struct Slot {
    const SafetensorsFile* file;
    const SafetensorsEntry* entry;
  };
  const Slot& slot(std::string_view name) const;

  std::string dir_;
  std::string weights_path_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;  // stable addresses for Slot
  std::map<std::string, Slot, std::less<>> slots_;
  std::vector<std::string> names_;
};

}  // namespace ftune::io
