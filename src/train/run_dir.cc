// The run directory around the training loop (see run_dir.h).
#include "train/run_dir.h"

#include <fmt/format.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "data/memory_source.h"
#include "io/atomic_file.h"
#include "io/dir_lock.h"
#include "io/fingerprint.h"

namespace ftune {

namespace fs = std::filesystem;

const std::vector<std::string> kTokenizerFiles = {
    "tokenizer.json", "tokenizer_config.json",   "special_tokens_map.json",
    "vocab.txt",      "sentencepiece.bpe.model", "merges.txt",
    "vocab.json",     "added_tokens.json"};

namespace {

// The configuration sections that determine the arithmetic of a run, canonically serialised:
// resume refuses when they differ (threads, logging, prefetch depth and reduction buckets do not
// change results).
std::string trajectory_config(const YAML::Node& resolved) {
  YAML::Node n;
  for (const char* section : {"model", "data", "training", "preset", "peft"})
    if (resolved[section]) n[section] = YAML::Clone(resolved[section]);
  if (n["training"]) {
    for (const char* k : {"threads", "log_every", "prefetch", "max_nonfinite_steps", "cuda_graphs",
                            "reduce_bucket_mb"})
      n["training"].remove(k);
  }
  YAML::Emitter out;
  out << n;
  return out.c_str();
}

std::vector<std::string> model_files(const std::string& dir) {
  std::vector<std::string> names = {"config.json", "model.safetensors.index.json"};
  std::vector<std::string> shards;
  for (const auto& item : fs::directory_iterator(dir))
    if (item.path().extension() == ".safetensors") shards.push_back(item.path().filename());
  std::sort(shards.begin(), shards.end());
  names.insert(names.end(), shards.begin(), shards.end());
  return names;
}

}  // namespace

const char* const kRunMarker = ".ftune-run";

bool is_run_dir_name(const std::string& name) {
  static const std::set<std::string> names = {kRunMarker,     io::DirLock::kFileName,
                                              "config.yaml",  "metrics.jsonl",
                                              "summary.json", "op_profile.json",
                                              "checkpoints",  "model",
                                              "adapter",      "model.tmp",
                                              "adapter.tmp",  "model.old",
                                              "adapter.old"};
  if (names.count(name)) return true;
  if (name.starts_with("events.out.tfevents.")) return true;
  // An atomic write's temporary (io/atomic_file.h) of one of those files, left by a kill -9.
  for (const char* f : {"config.yaml", "metrics.jsonl", "summary.json", "op_profile.json"})
    if (name.starts_with(fmt::format(".{}.tmp-", f))) return true;
  return false;
}

void check_run_dir(const fs::path& run, bool resume, bool overwrite,
                   const std::vector<io::NamedPath>& inputs) {
  // The run's inputs may not be inside it (model.path=<run>/model with overwrite, output.dir: .
  // next to the data).
  for (const io::NamedPath& in : inputs) {
    if (!in.path.empty() && !data::is_memory_path(in.path) &&
        io::path_within(in.path, run.string()))
      throw InputError(fmt::format(
          "output.dir {} contains {} {}: ftune writes and replaces files in its run directory, so "
          "it never runs in one that holds its inputs; choose another output.dir",
          run.string(), in.what, in.path));
  }
  const bool marked = fs::exists(run / kRunMarker);
  if (fs::is_directory(run) && !marked) {
    std::vector<std::string> found;
    for (const auto& item : fs::directory_iterator(run)) {
      const std::string name = item.path().filename().string();
      if (name == io::DirLock::kFileName) continue;  // ours, taken just now
      found.push_back(item.is_directory() ? name + "/" : name);
    }
    std::sort(found.begin(), found.end());
    if (found.size() > 8) {
      found.resize(8);
      found.push_back("...");
    }
    if (!found.empty())
      throw InputError(fmt::format(
          "output.dir {} holds files ftune did not write ({}) and no {} marker: ftune writes a run "
          "only into a new or empty directory or one of its own runs, and never deletes or "
          "replaces a file it cannot prove it wrote; choose another output.dir{}",
          run.string(), fmt::join(found, ", "), kRunMarker,
          fs::exists(run / "checkpoints" / "index.json")
              ? fmt::format(" (a run directory of an ftune older than the marker: create {} "
                            "in it to let ftune manage it)",
                            (run / kRunMarker).string())
              : ""));
  }
  const bool exists = fs::exists(run / "checkpoints") || fs::exists(run / "summary.json") ||
                      fs::exists(run / "metrics.jsonl");
  if (resume) {
    if (!fs::exists(run / "checkpoints" / "index.json"))
      throw InputError(fmt::format(
          "{}: no checkpoint to resume from (checkpoints/index.json is missing)", run.string()));
  } else if (exists && !overwrite) {
    throw InputError(
        fmt::format("output.dir {} already holds a run; pass --resume to continue it or set "
                    "output.overwrite=true to replace it",
                    run.string()));
  }
}

void prepare_run_dir(const fs::path& run, bool resume, const YAML::Node& resolved) {
  fs::create_directories(run);
  // check_run_dir accepted the directory: empty (but for the lock), or marked as ftune's. Only in
  // a marked one does anything go, and only ftune's own names (a file the user added stays).
  if (!resume && fs::exists(run / kRunMarker)) {
    for (const auto& item : fs::directory_iterator(run)) {
      const std::string name = item.path().filename().string();
      if (name == kRunMarker || name == io::DirLock::kFileName || name == "config.yaml") continue;
      if (is_run_dir_name(name)) fs::remove_all(item.path());
    }
  }
  if (!fs::exists(run / kRunMarker))
    io::write_file_atomic((run / kRunMarker).string(),
                          "{\"written_by\": \"ftune train\", \"note\": \"ftune removes or replaces "
                          "only its own files in a directory marked so\"}\n");
  YAML::Emitter out;
  out << resolved;
  io::write_file_atomic((run / "config.yaml").string(), std::string(out.c_str()) + "\n");
}

nlohmann::json run_fingerprints(const TrainConfig& cfg, const TrainData& data) {
  nlohmann::json f;
  f["model"] = io::directory_fingerprint(cfg.model.path, model_files(cfg.model.path));
  f["tokenizer"] = io::directory_fingerprint(cfg.model.path, kTokenizerFiles);
  for (const std::string& file : data.files)
    f["data"][file] = data::is_memory_path(file)
                          ? io::text_fingerprint(*data::memory_text(file))  // rows given in memory
                          : io::file_fingerprint(file);
  f["config"] = io::text_fingerprint(trajectory_config(cfg.resolved));
  // The label set in id order: what the head's rows mean (it follows from the data and the
  // config, and from how ftune reads labels, which changed once: data/examples.h).
  f["labels"] = data.labels.names;
  return f;
}

void copy_tokenizer_files(const std::string& from, const std::string& to) {
  for (const std::string& name : kTokenizerFiles) {
    const fs::path src = fs::path(from) / name;
    if (fs::exists(src))
      io::write_file_atomic((fs::path(to) / name).string(), io::read_file(src.string()));
  }
}

void publish_dir(const std::string& dst, const std::function<void(const std::string&)>& fill) {
  const std::string tmp = dst + ".tmp", old = dst + ".old";
  fs::remove_all(tmp);  // a leftover of an interrupted publish (ftune's name in its run dir)
  try {
    fs::create_directories(tmp);
    fill(tmp);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  io::replace_directory(tmp, dst, old);  // whole: never a mix of the old and the new files
}

void publish_model(const std::string& checkpoint, const std::string& dst) {
  publish_dir(dst, [&](const std::string& tmp) {
    for (const auto& item : fs::directory_iterator(checkpoint)) {
      const std::string name = item.path().filename().string();
      if (name == "trainer_state.json" || name == "optimizer.safetensors") continue;
      std::error_code ec;
      fs::create_hard_link(item.path(), fs::path(tmp) / name, ec);
      if (ec) fs::copy_file(item.path(), fs::path(tmp) / name);
    }
  });
}

}  // namespace ftune
