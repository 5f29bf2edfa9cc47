// Reading a run directory for the run views (run_data.h).
#include "report/run_data.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/json_file.h"

namespace ftune::report {
namespace fs = std::filesystem;

namespace {

// A run directory's file, only as the regular file ftune wrote: a symbolic link (config.yaml ->
// /etc/passwd) or a device is refused, so neither the report nor the dashboard serves files from
// outside the run directory. O_NOFOLLOW checks the name that is opened, not one checked before.
std::string read_text(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ELOOP)
      throw InputError(fmt::format("{}: is a symbolic link; ftune reads a run directory's files "
                                   "only as regular files",
                                   path.string()));
    throw InputError(fmt::format("{}: cannot be read ({})", path.string(), std::strerror(errno)));
  }
  std::string text;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(fmt::format("{}: not a regular file", path.string()));
  }
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  const int read_errno = errno;
  ::close(fd);
  if (n < 0)
    throw InputError(fmt::format("{}: cannot be read ({})", path.string(),
                                 std::strerror(read_errno)));
  return text;
}

// metrics.jsonl: every complete line is a JSON object with "split" and "step". The text after
// the last newline is a line being written by a live run: not read yet.
void read_metrics(const fs::path& path, RunData& run) {
  const std::string text = read_text(path);
  size_t begin = 0;
  int line_no = 0;
  while (true) {
    const size_t end = text.find('\n', begin);
    if (end == std::string::npos) break;
    ++line_no;
    const std::string_view line(text.data() + begin, end - begin);
    begin = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = fmt::format("{}:{}", path.string(), line_no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: invalid JSON: {}", where, io::parse_error_detail(e)));
    }
    if (!j.is_object() || !j.contains("split") || !j["split"].is_string() || !j.contains("step") ||
        !j["step"].is_number())
      throw InputError(fmt::format("{}: expected a JSON object with \"split\" (a string) and "
                                   "\"step\" (a number)",
                                   where));
    (j["split"] == "train" ? run.train : run.evals).push_back(std::move(j));
  }
}

}  // namespace

RunData read_run_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw InputError(fmt::format("{}: not a run directory (no such directory)", dir));
  RunData run;
  run.dir = dir;
  const fs::path root(dir);
  const bool has_metrics = fs::exists(root / "metrics.jsonl", ec);
  const bool has_summary = fs::exists(root / "summary.json", ec);
  if (!has_metrics && !has_summary)
    throw InputError(fmt::format(
        "{}: not a run directory (neither metrics.jsonl nor summary.json; `ftune train` writes "
        "them in output.dir)",
        dir));
  if (has_metrics)
    read_metrics(root / "metrics.jsonl", run);
  else
    run.missing.push_back("metrics.jsonl");
  if (has_summary) {
    run.summary = io::parse_json(read_text(root / "summary.json"), (root / "summary.json").string());
    if (!run.summary.is_object())
      throw InputError(fmt::format("{}: expected a JSON object", (root / "summary.json").string()));
  } else {
    run.missing.push_back("summary.json (written when the run ends)");
  }
  if (fs::exists(root / "config.yaml", ec))
    run.config_yaml = read_text(root / "config.yaml");
  else
    run.missing.push_back("config.yaml");
  return run;
}

}  // namespace ftune::report
