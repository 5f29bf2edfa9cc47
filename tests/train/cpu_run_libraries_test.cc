// A CPU training run never loads the CUDA libraries it does not use: cuBLASLt and NVRTC are
// loaded on first use (cuda/lazy_library.h), and a CPU run never uses them, so they are never
// mapped into the process (they were ~180 MiB of a CPU process's peak RSS when linked).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "test_util.h"
#include "tiny_model.h"
#include "train/trainer.h"
#ifdef FTUNE_WITH_CUDA
#include "cuda/lazy_library.h"
#endif

namespace ftune::test {
namespace {

std::string process_maps() {
  std::ifstream in("/proc/self/maps");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(CpuRunLibraries, TrainingOnTheCpuNeverMapsCublasLtOrNvrtc) {
  TempDir tmp;
  const std::string model = tmp.path() + "/tiny";
  write_tiny_bert(model);
  write_pair_task(tmp.path() + "/train.jsonl", 48, 3);
  const std::string path = tmp.path() + "/run.yaml";
  std::ofstream(path) << "model:\n  path: " << model << "\ndata:\n  train: " << tmp.path()
                      << "/train.jsonl\n  max_length: 24\ntraining:\n  max_steps: 2\n"
                      << "  effective_batch_size: 16\n  threads: 2\n  device: cpu\n"
                      << "output:\n  dir: " << tmp.path() << "/run\n  progress: plain\n";
  const nlohmann::json summary = run_training(TrainConfig::load(path));
  EXPECT_EQ(summary["steps"], 2) << summary.dump();
  const std::string maps = process_maps();
  EXPECT_EQ(maps.find("libcublasLt"), std::string::npos);
  EXPECT_EQ(maps.find("libnvrtc"), std::string::npos);
#ifdef FTUNE_WITH_CUDA
  EXPECT_FALSE(cuda::cublaslt_runtime().attempted());
  EXPECT_FALSE(cuda::nvrtc_runtime().attempted());
#endif
}

}  // namespace
}  // namespace ftune::test
