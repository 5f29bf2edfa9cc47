// XXH3-128 fingerprints through memory-mapped files (see fingerprint.h).
#include "io/fingerprint.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <filesystem>

#include "io/mapped_file.h"

namespace ftune::io {
namespace {

std::string hex(XXH128_hash_t h) {
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

}  // namespace

std::string file_fingerprint(const std::string& path) {
  const MappedFile f = MappedFile::open(path);
  return hex(XXH3_128bits(f.data(), f.size()));
}

std::string directory_fingerprint(const std::string& dir, const std::vector<std::string>& names) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  for (const std::string& name : names) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    if (!std::filesystem::exists(path)) continue;
    const MappedFile f = MappedFile::open(path);
    XXH3_128bits_update(state, name.data(), name.size() + 1);
    const uint64_t size = f.size();
    XXH3_128bits_update(state, &size, sizeof size);
    if (size) XXH3_128bits_update(state, f.data(), f.size());
  }
  const std::string out = hex(XXH3_128bits_digest(state));
  XXH3_freeState(state);
  return out;
}

std::string text_fingerprint(const std::string& text) {
  return hex(XXH3_128bits(text.data(), text.size()));
}

}  // namespace ftune::io
