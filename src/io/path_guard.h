// Comparing the paths a command reads with the paths it writes, by what they resolve to rather than
// how they are spelled: symlinks, "dir/../dir", trailing slashes and hard links (same device and
// inode) all count as the same file. Every command that writes an output refuses one that would
// replace or sit inside one of its inputs (DESIGN.md principle 12: no input is ever replaced).
#pragma once

#include <string>
#include <vector>

namespace ftune::io {

// A path with what the user called it ("--model", "model.path"), for messages.
struct NamedPath {
  std::string what;
  std::string path;
};

// The absolute path with symlinks resolved as far as it exists ("." and ".." folded).
std::string resolved_path(const std::string& path);
// Whether `a` and `b` name the same file or directory (same inode, or the same resolved path
// where one does not exist yet).
bool same_path(const std::string& a, const std::string& b);
// Whether `inner` is `outer` or lies anywhere below it.
bool path_within(const std::string& inner, const std::string& outer);

// Throws InputError naming both when `output` is one of `inputs`, when `output` lies inside an
// input directory, or (output_is_dir) when an input lies inside the output directory that the
// command replaces: writing it would destroy what the command reads.
void refuse_output_over_inputs(const NamedPath& output, const std::vector<NamedPath>& inputs,
                               bool output_is_dir);

}  // namespace ftune::io
