// Replays fuzz inputs without libFuzzer: `fuzz_replay TARGET PATH...` runs the fuzz target
// fuzz/fuzz_TARGET.cc (compiled into this binary by the ordinary build, its entry points renamed
// by fuzz/replay.cmake) once on every file under the PATHs. The test suite replays the committed
// seeds and every crash input kept in fuzz/regressions/TARGET, so each target keeps compiling and
// every crash it found stays fixed, in any build. Exit status 0 when all inputs pass (a failing
// input aborts, or throws past the target's InputError rule), 2 on a usage error.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#define FTUNE_FUZZ_TARGET(name)                                              \
  extern "C" int ftune_fuzz_##name##_run(const uint8_t* data, size_t size);  \
  extern "C" int ftune_fuzz_##name##_init(int* argc, char*** argv) __attribute__((weak));
#include "fuzz_targets.inc"
#undef FTUNE_FUZZ_TARGET

namespace {

namespace fs = std::filesystem;

struct Target {
  const char* name;
  int (*run)(const uint8_t*, size_t);
  int (*init)(int*, char***);  // null where the target has no LLVMFuzzerInitialize
};

const Target kTargets[] = {
#define FTUNE_FUZZ_TARGET(name) {#name, ftune_fuzz_##name##_run, ftune_fuzz_##name##_init},
#include "fuzz_targets.inc"
#undef FTUNE_FUZZ_TARGET
};

int usage(const char* message) {
  std::fprintf(stderr, "fuzz_replay: %s\nusage: fuzz_replay TARGET PATH...\ntargets:", message);
  for (const Target& t : kTargets) std::fprintf(stderr, " %s", t.name);
  std::fprintf(stderr, "\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage("a target and at least one file or directory are required");
  const Target* target = nullptr;
  for (const Target& t : kTargets)
    if (std::strcmp(t.name, argv[1]) == 0) target = &t;
  if (!target) return usage((std::string("unknown target '") + argv[1] + "'").c_str());

  std::vector<fs::path> files;
  for (int i = 2; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (fs::is_regular_file(p)) {
      files.push_back(p);
    } else if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else {
      return usage((std::string("no file or directory '") + argv[i] + "'").c_str());
    }
  }
  if (files.empty()) return usage("no input files under the given paths");
  std::sort(files.begin(), files.end());

  if (target->init) target->init(&argc, &argv);
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // A buffer of exactly the input's size, as libFuzzer gives (a sanitized build sees overreads).
    const auto data = std::make_unique<uint8_t[]>(bytes.size());
    std::memcpy(data.get(), bytes.data(), bytes.size());
    std::fprintf(stderr, "%s: %s (%zu bytes)\n", target->name, f.c_str(), bytes.size());
    target->run(data.get(), bytes.size());
  }
  std::printf("fuzz_replay %s: %zu inputs passed\n", target->name, files.size());
  return 0;
}
