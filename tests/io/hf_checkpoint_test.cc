// Model directories saved by transformers (the golden fixtures of tests/fixtures/engine, written by
// tools/ scripts with save_pretrained): ftune reads every shard and writes it back byte for byte,
// and rewrites config.json and the shard index byte for byte, so a checkpoint saved by ftune is
// the file transformers would have saved.
#include <gtest/gtest.h>

#include <filesystem>

#include "io/atomic_file.h"
#include "io/checkpoint_reader.h"
#include "io/json_file.h"
#include "io_test_helpers.h"
#include "test_util.h"

namespace ftune::io {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> hf_model_dirs() {
  std::vector<std::string> dirs;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(test::fixtures_dir(), ec)) {
    const std::string name = e.path().filename().string();
    if (name == "model.safetensors" || name == "model.safetensors.index.json")
      dirs.push_back(e.path().parent_path().string());
  }
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  return dirs;
}

void expect_same_file(const std::string& ours, const std::string& theirs) {
  const std::string a = read_file(ours), b = read_file(theirs);
  EXPECT_EQ(a.size(), b.size()) << theirs;
  const auto diff = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  EXPECT_TRUE(diff.first == a.end() && diff.second == b.end())
      << theirs << ": first difference at byte " << (diff.first - a.begin());
}

TEST(HfCheckpoint, RewritesTransformersCheckpointsByteForByte) {
  const std::vector<std::string> dirs = hf_model_dirs();
  if (dirs.empty()) GTEST_SKIP() << "no Hugging Face model directories among the fixtures";
  test::TempDir tmp;
  int shards = 0;
  for (const std::string& dir : dirs) {
    SCOPED_TRACE(dir);
    const CheckpointReader reader = CheckpointReader::open(dir);
    EXPECT_FALSE(reader.names().empty());
    for (const std::string& shard : reader.shard_paths()) {
      const SafetensorsFile file = SafetensorsFile::open(shard);
      std::vector<HostTensor> held;
      std::vector<SafetensorsTensor> tensors;
      held.reserve(file.entries().size());
      for (const SafetensorsEntry& e : file.entries()) {
        held.push_back(file.read(e.name));  // as stored
        tensors.push_back({e.name, held.back().view(), std::nullopt});
      }
      const std::string out = (fs::path(tmp.path()) / fs::path(shard).filename()).string();
      write_safetensors(out, tensors, file.metadata());
      expect_same_file(out, shard);
      ++shards;
    }
    for (const char* json_name : {"config.json", "model.safetensors.index.json"}) {
      const std::string src = (fs::path(dir) / json_name).string();
      if (!fs::exists(src)) continue;
      const std::string out = (fs::path(tmp.path()) / json_name).string();
      write_json_atomic(out, read_json_file(src));
      expect_same_file(out, src);
    }
  }
  EXPECT_GT(shards, 0);
}

}  // namespace
}  // namespace ftune::io
