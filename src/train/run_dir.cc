// The run directory around the training loop (see run_dir.h).
#include "train/run_dir.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "io/atomic_file.h"
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

void check_run_dir(const fs::path& run, bool resume, bool overwrite) {
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
  if (!resume && fs::exists(run)) {
    for (const char* name : {"checkpoints", "model", "adapter", "summary.json", "metrics.jsonl"})
      fs::remove_all(run / name);
    for (const auto& item : fs::directory_iterator(run))
      if (item.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
        fs::remove(item.path());
  }
  fs::create_directories(run);
  YAML::Emitter out;
  out << resolved;
  io::write_file_atomic((run / "config.yaml").string(), std::string(out.c_str()) + "\n");
}

nlohmann::json run_fingerprints(const TrainConfig& cfg, const TrainData& data) {
  nlohmann::json f;
  f["model"] = io::directory_fingerprint(cfg.model.path, model_files(cfg.model.path));
  f["tokenizer"] = io::directory_fingerprint(cfg.model.path, kTokenizerFiles);
  for (const std::string& file : data.files) f["data"][file] = io::file_fingerprint(file);
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
  const std::string tmp = dst + ".tmp";
  fs::remove_all(tmp);
  try {
    fs::create_directories(tmp);
    fill(tmp);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  fs::remove_all(dst);
  fs::rename(tmp, dst);
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
