// The run directory (output.dir) around the training loop: refusing to clobber a run or to
// resume nothing, clearing and writing config.yaml at the start, the fingerprints a resume
// compares, and publishing model/ and adapter/ atomically at the end.
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/path_guard.h"
#include "train/train_config.h"
#include "train/train_data.h"

namespace ftune {

// The tokenizer files a model directory may hold (copied next to every saved model).
extern const std::vector<std::string> kTokenizerFiles;

// ftune deletes only what it wrote (DESIGN.md principle 12). Every run directory ftune creates,
// or adopts while it is empty, gets this marker file; only in a directory that holds it does ftune
// remove or replace anything, and only the names in kRunDirNames (and their temporaries).
extern const char* const kRunMarker;  // ".ftune-run"
// What ftune writes directly in a run directory.
bool is_run_dir_name(const std::string& name);

// Before any work (nothing is touched when it throws InputError):
//  - the run directory may not be or contain an input (`inputs`: model.path and the data
//    files): ftune replaces files there;
//  - an existing directory must be empty (but for ftune's lock) or carry kRunMarker; otherwise
//    it is the user's, and the message names what it holds;
//  - a resume needs checkpoints/index.json; a fresh run refuses a directory that already holds a
//    run unless output.overwrite is set.
void check_run_dir(const std::filesystem::path& run, bool resume, bool overwrite,
                   const std::vector<io::NamedPath>& inputs);
// After data and model loaded: a fresh run clears what an earlier run left (ftune's own names
// only); writes kRunMarker and config.yaml.
void prepare_run_dir(const std::filesystem::path& run, bool resume, const YAML::Node& resolved);

// What a resume must find unchanged: the model's and tokenizer's files, the data files, the
// configuration keys that determine the arithmetic, and the label set.
nlohmann::json run_fingerprints(const TrainConfig& config, const TrainData& data);

void copy_tokenizer_files(const std::string& from, const std::string& to);
// Fills `dst` through `dst`.tmp, swapped into place whole (the old `dst` renamed aside first, then
// removed); a failure (a full disk) removes the temporary directory before the error goes on, so
// nothing half-written stays behind. `dst` lies in a run directory that check_run_dir accepted.
void publish_dir(const std::string& dst, const std::function<void(const std::string&)>& fill);
// Hard links (or copies, across file systems) the HF model files of a checkpoint into `dst`.
void publish_model(const std::string& checkpoint, const std::string& dst);

}  // namespace ftune
