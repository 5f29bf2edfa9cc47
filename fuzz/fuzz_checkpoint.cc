// Fuzzes what `ftune train --resume` reads from a run directory (fuzz_files.h format; bytes before
// any "@@ NAME" header are checkpoints/index.json): the checkpoint index (CheckpointStore, which
// also removes directories the index does not name), then for the last and the best checkpoint its
// trainer_state.json (read_trainer_state, EarlyStopping::restore) and optimizer.safetensors (the
// AdamW moments read into buffers of the model's size, 16 parameters here). A store that opens
// must also save a new checkpoint, after which every checkpoint it lists exists on disk. Every
// refusal must be an InputError.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "core/memory.h"
#include "fuzz_files.h"
#include "io/safetensors.h"
#include "train/checkpoint_store.h"
#include "train/early_stopping.h"
#include "train/trainer_state.h"

namespace {

using namespace ftune;

constexpr int64_t kParams = 16;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_checkpoint: %s\n", what);
    std::abort();
  }
}

void read_checkpoint(const CheckpointEntry& c) {
  const std::string state_path = c.dir + "/trainer_state.json";
  fuzz::expect_input_error([&] {
    const TrainerState s = read_trainer_state(state_path);
    check(s.micro_batch >= 1 && s.step >= 0 && s.threads >= 1, "state out of range");
    EarlyStopping early("accuracy", true, 3, 0.0);
    early.restore(s.early_stopping, state_path + ": early_stopping");
    (void)early.update(0.5, 0.7, s.step + 1);
  });
  fuzz::expect_input_error([&] {
    const auto opt = io::SafetensorsFile::open(c.dir + "/optimizer.safetensors");
    HostTensor exp_avg(DType::F32, Shape{kParams}), exp_avg_sq(DType::F32, Shape{kParams});
    opt.read_into("exp_avg", exp_avg.view());
    opt.read_into("exp_avg_sq", exp_avg_sq.view());
  });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return ftune::fuzz::quiet_logs();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::ScratchDir dir;
  dir.reset(fuzz::split_files(std::string_view(reinterpret_cast<const char*>(data), size),
                              "checkpoints/index.json"));
  // A file where the checkpoints directory belongs is a filesystem error of the run directory
  // (issue 26, "Messages"), not a file format problem: not fuzzed here.
  const std::filesystem::path checkpoints = dir / "checkpoints";
  if (std::filesystem::exists(checkpoints) && !std::filesystem::is_directory(checkpoints)) return 0;
  fuzz::expect_input_error([&] {
    CheckpointStore store(dir.path(), 2);
    if (const auto last = store.last()) read_checkpoint(*last);
    if (const auto best = store.best()) read_checkpoint(*best);
    const int64_t next = store.last() ? store.last()->step + 1 : 1;
    store.save(next, false, [](const std::string& d) {
      std::FILE* f = std::fopen((d + "/trainer_state.json").c_str(), "w");
      check(f != nullptr, "cannot write into the new checkpoint");
      std::fclose(f);
    });
    for (const CheckpointEntry& e : store.entries())
      check(std::filesystem::is_directory(e.dir), "the store lists a checkpoint that is gone");
    // The index it wrote reads back to the same checkpoints.
    CheckpointStore again(dir.path(), 2);
    check(again.entries().size() == store.entries().size(), "index.json does not read back");
  });
  return 0;
}
