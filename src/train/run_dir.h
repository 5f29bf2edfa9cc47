// The run directory (output.dir) around the training loop: refusing to clobber a run or to
// resume nothing, clearing and writing config.yaml at the start, the fingerprints a resume
// compares, and publishing model/ and adapter/ atomically at the end.
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/train_config.h"
#include "train/train_data.h"

namespace ftune {

// The tokenizer files a model directory may hold (copied next to every saved model).
extern const std::vector<std::string> kTokenizerFiles;

// Before any work: a resume needs checkpoints/index.json; a fresh run refuses a directory that
// already holds one unless output.overwrite is set. Throws InputError.
void check_run_dir(const std::filesystem::path& run, bool resume, bool overwrite);
// After data and model loaded: a fresh run clears what an earlier run left; writes config.yaml.
void prepare_run_dir(const std::filesystem::path& run, bool resume, const YAML::Node& resolved);

// What a resume must find unchanged: the model's and tokenizer's files, the data files, the
// configuration keys that determine the arithmetic, and the label set.
nlohmann::json run_fingerprints(const TrainConfig& config, const TrainData& data);

void copy_tokenizer_files(const std::string& from, const std::string& to);
// Fills `dst` through `dst`.tmp, renamed into place; a failure (a full disk) removes the
// temporary directory before the error goes on, so nothing half-written stays behind.
void publish_dir(const std::string& dst, const std::function<void(const std::string&)>& fill);
// Hard links (or copies, across file systems) the HF model files of a checkpoint into `dst`.
void publish_model(const std::string& checkpoint, const std::string& dst);

}  // namespace ftune
