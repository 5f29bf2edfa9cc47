// Real-path comparison of inputs and outputs (see path_guard.h).
#include "io/path_guard.h"

#include <fmt/format.h>

#include <filesystem>
#include <system_error>

#include "core/error.h"

namespace ftune::io {
namespace {

namespace fs = std::filesystem;

fs::path resolve(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) p = fs::path(path);
  fs::path c = fs::weakly_canonical(p, ec);
  if (ec) c = p.lexically_normal();
  // "dir/" and "dir" are one directory.
  if (!c.has_filename() && c.has_parent_path() && c != c.root_path()) c = c.parent_path();
  return c;
}

bool equivalent_existing(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  const bool same = fs::equivalent(a, b, ec);
  return !ec && same;
}

}  // namespace

std::string resolved_path(const std::string& path) {
  return resolve(path).string();
}

bool same_path(const std::string& a, const std::string& b) {
  const fs::path ra = resolve(a), rb = resolve(b);
  return ra == rb || equivalent_existing(ra, rb);
}

bool path_within(const std::string& inner, const std::string& outer) {
  const fs::path ro = resolve(outer);
  // Walk up from `inner`: each ancestor is compared by path and by inode (a bind mount or a
  // second spelling of the same directory).
  for (fs::path p = resolve(inner);; p = p.parent_path()) {
    if (p == ro || equivalent_existing(p, ro)) return true;
    if (!p.has_parent_path() || p.parent_path() == p) return false;
  }
}

void refuse_output_over_inputs(const NamedPath& output, const std::vector<NamedPath>& inputs,
                               bool output_is_dir) {
  for (const NamedPath& in : inputs) {
    if (in.path.empty() || output.path.empty()) continue;
    std::string why;
    if (same_path(output.path, in.path))
      why = fmt::format("is {} ({})", in.what, in.path);
    else if (path_within(output.path, in.path))
      why = fmt::format("lies inside {} {}", in.what, in.path);
    else if (output_is_dir && path_within(in.path, output.path))
      why = fmt::format("contains {} {}, which writing it would replace", in.what, in.path);
    if (!why.empty())
      throw InputError(
          fmt::format("{} {} {}: ftune never writes over what it reads; choose another {}",
                      output.what, output.path, why, output.what));
  }
}

}  // namespace ftune::io
