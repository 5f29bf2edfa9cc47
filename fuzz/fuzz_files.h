// Shared by the file-loading fuzz targets: one fuzz input describes several files, which a target
// writes into a scratch directory before calling the real loader on it.
//
// Input format: a line "@@ NAME" starts a file named NAME (a relative path of [A-Za-z0-9._-]
// parts separated by '/', no "." or ".." part, at most 120 bytes); its content runs up to the
// next "\n@@ " or the end of the input. Bytes before the first header belong to the target's
// default file (none when that part is empty). A file with an invalid name is dropped; a repeated
// name keeps its last content.
//
// The outcome rule of every target is in expect_input_error(): a loader may accept the input or
// refuse it with ftune::InputError (a message naming the file and what was expected); any other
// exception (an internal assertion, a ShapeError without the file's name, a JSON library
// exception, std::bad_alloc) escapes, and libFuzzer reports it as a crash.
#pragma once

#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

#include "core/error.h"

namespace ftune::fuzz {

inline bool valid_file_name(std::string_view name) {
  if (name.empty() || name.size() > 120 || name.front() == '/' || name.back() == '/') return false;
  size_t start = 0;
  while (start <= name.size()) {
    const size_t slash = std::min(name.find('/', start), name.size());
    const std::string_view part = name.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    for (char c : part)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
        return false;
    start = slash + 1;
  }
  return true;
}

inline std::map<std::string, std::string> split_files(std::string_view input,
                                                      const std::string& default_name) {
  std::map<std::string, std::string> files;
  std::string name = default_name;
  size_t pos = 0;
  while (true) {
    size_t content_begin = pos;
    if (input.substr(pos, 3) == "@@ ") {
      const size_t eol = input.find('\n', pos);
      name = std::string(
          input.substr(pos + 3, (eol == std::string_view::npos ? input.size() : eol) - pos - 3));
      content_begin = eol == std::string_view::npos ? input.size() : eol + 1;
    }
    const size_t next = input.find("\n@@ ", content_begin);
    const size_t content_end = next == std::string_view::npos ? input.size() : next;
    // (An empty default section, as when the input starts with a newline, writes no file.)
    const bool empty_default = pos == 0 && name == default_name && content_end == content_begin;
    if (valid_file_name(name) && !empty_default)
      files[name] = std::string(input.substr(content_begin, content_end - content_begin));
    if (next == std::string_view::npos) break;
    pos = next + 1;
  }
  return files;
}

// A private directory under /dev/shm (or $TMPDIR), emptied before each input, removed at exit.
class ScratchDir {
 public:
  ScratchDir() {
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : nullptr;
    if (!base) base = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
    std::string templ = std::string(base) + "/ftune-fuzz-XXXXXX";
    if (!mkdtemp(templ.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    path_ = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

  // Empties the directory and writes `files` into it.
  void reset(const std::map<std::string, std::string>& files) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(path_, ec))
      std::filesystem::remove_all(entry.path(), ec);
    for (const auto& [name, content] : files) {
      const std::filesystem::path p = std::filesystem::path(path_) / name;
      std::filesystem::create_directories(p.parent_path(), ec);
      if (ec) continue;  // "a/b" after a file "a": that file loses
      std::ofstream out(p, std::ios::binary);
      out.write(content.data(), static_cast<std::streamsize>(content.size()));
    }
  }

 private:
  std::string path_;
};

// Loaders log what they skip or re-initialise: silence it (it would dominate the run time).
inline int quiet_logs() {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

// Runs f; an InputError is an accepted outcome, anything else propagates (a crash for libFuzzer).
// FTUNE_FUZZ_VERBOSE=1 prints the refusals (to see why a seed does not load).
template <typename F>
void expect_input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    static const bool verbose = std::getenv("FTUNE_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "InputError: %s\n", e.what());
  }
}

}  // namespace ftune::fuzz
