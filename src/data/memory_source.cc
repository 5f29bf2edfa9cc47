// The process's registry of in-memory data sources (see memory_source.h).
#include "data/memory_source.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <mutex>

#include "core/error.h"
#include "io/atomic_file.h"

namespace ftune::data {
namespace {

constexpr const char* kPrefix = "memory:";

struct Registry {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const std::string>> texts;  // by path
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

bool is_memory_path(const std::string& path) {
  return path.rfind(kPrefix, 0) == 0;
}

MemorySource::MemorySource(const std::string& name, std::string text) : path_(kPrefix + name) {
  if (name.empty())
    throw InputError(
        "an in-memory data source needs a name (memory:NAME, e.g. memory:train.jsonl)");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.texts.count(path_))
    throw InputError(fmt::format(
        "{}: another run of this process holds in-memory rows under this name; give this run "
        "its own name",
        path_));
  r.texts.emplace(path_, std::make_shared<const std::string>(std::move(text)));
  held_ = true;
}

MemorySource::~MemorySource() {
  release();
}

void MemorySource::release() {
  if (!held_) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.texts.erase(path_);
  held_ = false;
}

std::shared_ptr<const std::string> memory_text(const std::string& path) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.texts.find(path);
  if (it == r.texts.end())
    throw InputError(fmt::format(
        "{}: no in-memory rows are registered under this name ('memory:' paths name rows given "
        "in memory, e.g. ftune.train(train=rows) in Python; a file needs another path)",
        path));
  return it->second;
}

std::string read_data_source(const std::string& path) {
  if (is_memory_path(path)) return *memory_text(path);
  return io::read_file(path);
}

bool data_source_exists(const std::string& path) {
  if (!is_memory_path(path)) return std::filesystem::exists(path);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.texts.count(path) > 0;
}

}  // namespace ftune::data
