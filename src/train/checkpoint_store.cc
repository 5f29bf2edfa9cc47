// Atomic checkpoint directories with an index and retention (see checkpoint_store.h).
#include "train/checkpoint_store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string_view>

#include "core/error.h"
#include "io/json_file.h"

namespace ftune {
namespace {

namespace fs = std::filesystem;

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// step-NNNNNNN, or a save's temporary .tmp-step-NNNNNNN-PID.
bool is_checkpoint_dir_name(std::string_view name) {
  if (name.starts_with(".tmp-")) {
    name.remove_prefix(5);
    const size_t dash = name.rfind('-');
    if (dash == std::string_view::npos || !all_digits(name.substr(dash + 1))) return false;
    name = name.substr(0, dash);
  }
  return name.starts_with("step-") && all_digits(name.substr(5));
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  return fmt::format("step-{:07d}", step);
}

CheckpointStore::CheckpointStore(std::string run_dir, int64_t keep_last)
    : root_((fs::path(run_dir) / "checkpoints").string()), keep_last_(keep_last) {
  fs::create_directories(root_);
  const std::string index = (fs::path(root_) / "index.json").string();
  if (fs::exists(index)) {
    const nlohmann::json j = io::read_json_file(index);
    if (!j.is_object() || !j.contains("checkpoints") || !j["checkpoints"].is_array())
      throw InputError(fmt::format("{}: expected an object with a 'checkpoints' array", index));
    for (const auto& e : j["checkpoints"]) {
      const int64_t step = io::get_int(e, "step", index + ": checkpoints[]");
      if (step < 0)
        throw InputError(fmt::format("{}: checkpoint step {} is negative", index, step));
      if (find(step))
        throw InputError(fmt::format("{}: checkpoint {} is listed twice", index, step));
      const std::string dir = (fs::path(root_) / checkpoint_dir_name(step)).string();
      if (!fs::is_directory(dir))
        throw InputError(
            fmt::format("{}: names checkpoint {} but {} is missing", index, step, dir));
      entries_.push_back({step, dir});
    }
    std::sort(entries_.begin(), entries_.end(),
              [](const auto& a, const auto& b) { return a.step < b.step; });
    best_step_ = io::get_optional_int(j, "best_step", index).value_or(-1);
  }
  // Leftovers of an interrupted save or of retention: a checkpoint directory (by ftune's names:
  // step-NNNNNNN, .tmp-step-NNNNNNN-PID) that the index does not name. Anything else is not
  // ftune's and stays.
  for (const auto& item : fs::directory_iterator(root_)) {
    if (!item.is_directory()) continue;
    const std::string name = item.path().filename().string();
    if (!is_checkpoint_dir_name(name)) continue;
    const bool named = std::any_of(entries_.begin(), entries_.end(), [&](const auto& e) {
      return fs::path(e.dir).filename() == name;
    });
    if (!named) {
      spdlog::info("removing incomplete or retired checkpoint {}", item.path().string());
      fs::remove_all(item.path());
    }
  }
}

std::optional<CheckpointEntry> CheckpointStore::find(int64_t step) const {
  for (const auto& e : entries_)
    if (e.step == step) return e;
  return std::nullopt;
}

std::optional<CheckpointEntry> CheckpointStore::last() const {
  if (entries_.empty()) return std::nullopt;
  return entries_.back();
}

std::optional<CheckpointEntry> CheckpointStore::best() const {
  return best_step_ < 0 ? std::nullopt : find(best_step_);
}

std::string CheckpointStore::save(int64_t step, bool best,
                                  const std::function<void(const std::string&)>& write) {
  if (auto existing = find(step)) {
    if (best) set_best(step);
    return existing->dir;
  }
  const std::string dir = (fs::path(root_) / checkpoint_dir_name(step)).string();
  const std::string tmp = (fs::path(root_) / fmt::format(".tmp-{}-{}", checkpoint_dir_name(step),
                                                         static_cast<long>(getpid())))
                              .string();
  fs::remove_all(tmp);
  try {
    fs::create_directories(tmp);
    write(tmp);
  } catch (...) {
    // A write that failed (a full disk) leaves nothing behind: the previous checkpoints stay
    // the complete ones, and no partial directory waits for the next resume to be removed.
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  fs::remove_all(dir);  // not in the index: a leftover
  fs::rename(tmp, dir);
  entries_.push_back({step, dir});
  std::sort(entries_.begin(), entries_.end(),
            [](const auto& a, const auto& b) { return a.step < b.step; });
  if (best) best_step_ = step;
  write_index();
  apply_retention();
  return dir;
}

void CheckpointStore::set_best(int64_t step) {
  FTUNE_ASSERT(find(step).has_value(), "set_best of a checkpoint that does not exist");
  best_step_ = step;
  write_index();
  apply_retention();
}

void CheckpointStore::write_index() const {
  nlohmann::json j;
  j["checkpoints"] = nlohmann::json::array();
  for (const auto& e : entries_)
    j["checkpoints"].push_back({{"step", e.step}, {"dir", fs::path(e.dir).filename().string()}});
  j["best_step"] = best_step_;
  j["last_step"] = entries_.empty() ? -1 : entries_.back().step;
  io::write_json_atomic((fs::path(root_) / "index.json").string(), j);
}

void CheckpointStore::apply_retention() {
  std::vector<CheckpointEntry> keep, drop;
  const size_t n = entries_.size();
  for (size_t i = 0; i < n; ++i) {
    const bool recent = static_cast<int64_t>(n - i) <= keep_last_;
    (recent || entries_[i].step == best_step_ ? keep : drop).push_back(entries_[i]);
  }
  if (drop.empty()) return;
  entries_ = std::move(keep);
  write_index();  // the index stops naming them before they go
  for (const auto& e : drop) fs::remove_all(e.dir);
}

}  // namespace ftune
