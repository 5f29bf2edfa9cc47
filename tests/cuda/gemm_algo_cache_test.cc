// The GEMM algorithm cache file (cuda/gemm_algo_cache.h): round trip, merge of concurrent writers
// (processes), corrupt / foreign-version files as a warned-about miss that the next save
// rebuilds, key sensitivity, the file's location from the environment. Plain C++: runs on every
// machine, with or without CUDA.
#include "cuda/gemm_algo_cache.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "io/json_file.h"
#include "test_util.h"

namespace ftune::cuda {
namespace {

using test::ScopedEnv;
using test::TempDir;

GemmAlgoKey key(int64_t M = 4096, GemmEpilogue e = GemmEpilogue::Bias) {
  GemmAlgoKey k;
  k.device = "NVIDIA H100 80GB HBM3";
  k.sm = 90;
  k.cublaslt_version = 130100;
  k.trans_b = true;
  k.M = M;
  k.N = 3072;
  k.K = 768;
  k.lda = 768;
  k.ldb = 768;
  k.ldc = 3072;
  k.a_type = DType::BF16;
  k.b_type = DType::BF16;
  k.c_type = DType::BF16;
  k.bias_type = DType::BF16;
  k.epilogue = e;
  k.align_a = k.align_b = k.align_c = k.align_bias = 16;
  return k;
}

GemmAlgoEntry entry(uint64_t seed) {
  GemmAlgoEntry e;
  for (size_t i = 0; i < e.algo.size(); ++i) e.algo[i] = seed * 0x9e3779b97f4a7c15ull + i;
  e.algo[7] = ~uint64_t{0};  // all 64 bits survive (no JSON double rounding)
  e.time_us = 12.5 + static_cast<double>(seed);
  e.candidates = 8;
  return e;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(GemmAlgoCache, RoundTripKeepsEveryWordAndField) {
  TempDir dir;
  const std::string path = dir.path() + "/sub/dir/gemm_algorithms.json";  // directories created
  GemmAlgoCache a(path);
  a.put(key(4096), entry(1));
  a.put(key(512, GemmEpilogue::None), entry(2));
  EXPECT_FALSE(a.save());

  GemmAlgoCache b(path);
  EXPECT_FALSE(b.load());
  ASSERT_EQ(b.size(), 2u);
  const GemmAlgoEntry* e1 = b.find(key(4096));
  ASSERT_NE(e1, nullptr);
  EXPECT_EQ(e1->algo, entry(1).algo);
  EXPECT_DOUBLE_EQ(e1->time_us, entry(1).time_us);
  EXPECT_EQ(e1->candidates, 8);
  const GemmAlgoEntry* e2 = b.find(key(512, GemmEpilogue::None));
  ASSERT_NE(e2, nullptr);
  EXPECT_EQ(e2->algo, entry(2).algo);
  EXPECT_EQ(b.find(key(513)), nullptr);

  // The file is readable JSON with the documented layout.
  const auto j = io::read_json_file(path);
  EXPECT_EQ(j["format"], "ftune-gemm-algorithms");
  EXPECT_EQ(j["version"], kGemmAlgoCacheVersion);
  ASSERT_EQ(j["entries"].size(), 2u);
  EXPECT_EQ(j["entries"][0]["algo"][7], "0xffffffffffffffff");
  EXPECT_EQ(j["entries"][0]["key"]["device"], "NVIDIA H100 80GB HBM3");
}

TEST(GemmAlgoCache, MissingFileIsAnEmptyCacheWithoutWarning) {
  TempDir dir;
  GemmAlgoCache c(dir.path() + "/none.json");
  EXPECT_FALSE(c.load());
  EXPECT_EQ(c.size(), 0u);
  GemmAlgoCache memory_only("");
  memory_only.put(key(), entry(1));
  EXPECT_FALSE(memory_only.save());
  EXPECT_NE(memory_only.find(key()), nullptr);
}

TEST(GemmAlgoCache, TwoWritersMergeAndLearnEachOthersEntries) {
  TempDir dir;
  const std::string path = dir.path() + "/gemm.json";
  GemmAlgoCache a(path), b(path);
  a.load();
  b.load();  // both start from an empty file
  a.put(key(1), entry(1));
  a.put(key(3), entry(31));  // both time shape 3; the later writer's choice ends in the file
  b.put(key(2), entry(2));
  b.put(key(3), entry(32));
  EXPECT_FALSE(a.save());
  EXPECT_FALSE(b.save());
  EXPECT_NE(b.find(key(1)), nullptr);  // b learned a's entry while merging

  GemmAlgoCache c(path);
  c.load();
  EXPECT_EQ(c.size(), 3u);
  ASSERT_NE(c.find(key(1)), nullptr);
  ASSERT_NE(c.find(key(2)), nullptr);
  EXPECT_EQ(c.find(key(1))->algo, entry(1).algo);
  EXPECT_EQ(c.find(key(2))->algo, entry(2).algo);
  EXPECT_EQ(c.find(key(3))->algo, entry(32).algo);
  // a's own entry for shape 3 wins in a's memory even after it reads the file again.
  EXPECT_FALSE(a.save());
  EXPECT_EQ(a.find(key(3))->algo, entry(31).algo);
}

TEST(GemmAlgoCache, ConcurrentProcessesLoseNoEntry) {
  TempDir dir;
  const std::string path = dir.path() + "/gemm.json";
  constexpr int kProcs = 6, kEach = 5;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Each worker process saves after each new shape, as gemm.cu does.
      GemmAlgoCache c(path);
      c.load();
      bool ok = true;
      for (int i = 0; i < kEach; ++i) {
        c.put(key(1000 * (p + 1) + i), entry(p * kEach + i));
        ok = !c.save() && ok;
      }
      ::_exit(ok ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  GemmAlgoCache c(path);
  EXPECT_FALSE(c.load());
  EXPECT_EQ(c.size(), static_cast<size_t>(kProcs * kEach));
  for (int p = 0; p < kProcs; ++p)
    for (int i = 0; i < kEach; ++i) {
      const GemmAlgoEntry* e = c.find(key(1000 * (p + 1) + i));
      ASSERT_NE(e, nullptr) << p << " " << i;
      EXPECT_EQ(e->algo, entry(p * kEach + i).algo);
    }
}

TEST(GemmAlgoCache, CorruptFileWarnsNamingItAndIsRebuilt) {
  TempDir dir;
  const std::string path = dir.path() + "/gemm.json";
  write_text(path, "{\"format\": \"ftune-gemm-algorithms\", \"version\": 3, \"entries\": [");
  GemmAlgoCache c(path);
  const auto warning = c.load();
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find(path), std::string::npos) << *warning;
  EXPECT_NE(warning->find("invalid JSON"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("ignored"), std::string::npos) << *warning;
  EXPECT_EQ(c.size(), 0u);
  c.put(key(), entry(5));
  EXPECT_FALSE(c.save());
  GemmAlgoCache d(path);
  EXPECT_FALSE(d.load());
  EXPECT_EQ(d.size(), 1u);
}

TEST(GemmAlgoCache, ForeignVersionOrFormatIsIgnoredWithAWarning) {
  TempDir dir;
  const std::string path = dir.path() + "/gemm.json";
  write_text(path, R"({"format": "ftune-gemm-algorithms", "version": 1, "entries": []})");
  GemmAlgoCache c(path);
  auto warning = c.load();
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find(path), std::string::npos) << *warning;
  EXPECT_NE(warning->find("version 1 is not the version this ftune writes (3)"),
            std::string::npos)
      << *warning;

  write_text(path, R"({"format": "something-else", "version": 3, "entries": []})");
  warning = GemmAlgoCache(path).load();
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find("format \"something-else\""), std::string::npos) << *warning;

  write_text(path, R"([1, 2, 3])");
  warning = GemmAlgoCache(path).load();
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find("expected a JSON object, got array"), std::string::npos) << *warning;
}

TEST(GemmAlgoCache, MalformedEntryIsNamed) {
  TempDir dir;
  const std::string path = dir.path() + "/gemm.json";
  GemmAlgoCache a(path);
  a.put(key(), entry(1));
  ASSERT_FALSE(a.save());
  auto j = io::read_json_file(path);
  j["entries"][0]["algo"][3] = "0x12";  // too short
  write_text(path, j.dump());
  auto warning = GemmAlgoCache(path).load();
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find("entries[0].algo: algo word \"0x12\""), std::string::npos) << *warning;

  j = io::read_json_file(dir.path() + "/gemm.json");
  j["entries"][0]["algo"][3] = "0x0000000000000001";
  j["entries"][0]["key"]["c_type"] = "i32";
  write_text(path, j.dump());
  warning = GemmAlgoCache(path).load();
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find("entries[0].key.c_type: unknown GEMM element type \"i32\""),
            std::string::npos)
      << *warning;

  j["entries"][0]["key"]["c_type"] = "bf16";
  j["entries"][0]["key"].erase("bias_type");
  write_text(path, j.dump());
  warning = GemmAlgoCache(path).load();
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find("bias_type"), std::string::npos) << *warning;
}

TEST(GemmAlgoCache, UnwritableLocationWarnsAndDoesNotThrow) {
  TempDir dir;
  write_text(dir.path() + "/file", "x");
  GemmAlgoCache c(dir.path() + "/file/gemm.json");  // parent is a regular file
  c.put(key(), entry(1));
  std::optional<std::string> warning;
  EXPECT_NO_THROW(warning = c.save());
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find(dir.path() + "/file/gemm.json"), std::string::npos) << *warning;
  EXPECT_NE(c.find(key()), nullptr);  // still usable in memory
}

TEST(GemmAlgoKey, EveryFieldChangesTheKey) {
  std::vector<GemmAlgoKey> keys;
  keys.push_back(key());
  auto vary = [&](auto&& change) {
    GemmAlgoKey k = key();
    change(k);
    keys.push_back(k);
  };
  vary([](GemmAlgoKey& k) { k.device = "NVIDIA A100-SXM4-80GB"; });
  vary([](GemmAlgoKey& k) { k.sm = 80; });
  vary([](GemmAlgoKey& k) { k.cublaslt_version = 130000; });
  vary([](GemmAlgoKey& k) { k.trans_a = true; });
  vary([](GemmAlgoKey& k) { k.trans_b = false; });
  vary([](GemmAlgoKey& k) { k.M = 4097; });
  vary([](GemmAlgoKey& k) { k.N = 3073; });
  vary([](GemmAlgoKey& k) { k.K = 769; });
  vary([](GemmAlgoKey& k) { k.lda = 800; });
  vary([](GemmAlgoKey& k) { k.ldb = 800; });
  vary([](GemmAlgoKey& k) { k.ldc = 3080; });
  vary([](GemmAlgoKey& k) { k.a_type = DType::F16; });
  vary([](GemmAlgoKey& k) { k.b_type = DType::F16; });
  vary([](GemmAlgoKey& k) { k.c_type = DType::F32; });
  vary([](GemmAlgoKey& k) { k.bias_type = DType::F32; });
  vary([](GemmAlgoKey& k) { k.epilogue = GemmEpilogue::None; });
  vary([](GemmAlgoKey& k) { k.tf32 = true; });
  vary([](GemmAlgoKey& k) { k.align_a = 8; });
  vary([](GemmAlgoKey& k) { k.align_b = 8; });
  vary([](GemmAlgoKey& k) { k.align_c = 8; });
  vary([](GemmAlgoKey& k) { k.align_bias = 8; });
  std::set<std::string> strings;
  for (const auto& k : keys) strings.insert(k.str());
  EXPECT_EQ(strings.size(), keys.size());
  EXPECT_EQ(key().str(), key().str());

  // And each of them is its own entry through a file round trip.
  TempDir dir;
  GemmAlgoCache a(dir.path() + "/k.json");
  for (size_t i = 0; i < keys.size(); ++i) a.put(keys[i], entry(i));
  ASSERT_FALSE(a.save());
  GemmAlgoCache b(dir.path() + "/k.json");
  ASSERT_FALSE(b.load());
  ASSERT_EQ(b.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_NE(b.find(keys[i]), nullptr) << keys[i].str();
    EXPECT_EQ(b.find(keys[i])->algo, entry(i).algo) << keys[i].str();
  }
}

TEST(GemmAlgoKey, SizeBucketsAreFourPerOctaveAndNeverMoreThanAQuarterAbove) {
  EXPECT_EQ(gemm_size_bucket(1), 1);
  EXPECT_EQ(gemm_size_bucket(64), 64);
  EXPECT_EQ(gemm_size_bucket(65), 80);
  EXPECT_EQ(gemm_size_bucket(1000), 1024);
  EXPECT_EQ(gemm_size_bucket(3000), 3072);
  EXPECT_EQ(gemm_size_bucket(2304), 2560);
  int64_t previous = 0;
  int64_t buckets = 0;
  for (int64_t d = 1; d <= 1 << 16; ++d) {
    const int64_t b = gemm_size_bucket(d);
    ASSERT_GE(b, d);
    ASSERT_LE(b, d + d / 4) << d;
    ASSERT_GE(b, previous) << d;  // monotone
    if (b != previous) ++buckets;
    previous = b;
    if ((d & (d - 1)) == 0) ASSERT_EQ(b, d) << "powers of two stay";
    if (d % 256 == 0 && d >= 1024) ASSERT_EQ(b % 256, 0) << d;
  }
  // 64 exact sizes, then 4 per octave from 64 to 65536: a training run's token counts (up to
  // micro-batch x max_length) fall into a few dozen buckets, not thousands of shapes.
  EXPECT_EQ(buckets, 64 + 4 * 10);
}

TEST(GemmAlgoKey, AlignmentClassIsCappedAt16) {
  EXPECT_EQ(gemm_alignment_class(nullptr), 0u);
  EXPECT_EQ(gemm_alignment_class(reinterpret_cast<void*>(0x1000)), 16u);
  EXPECT_EQ(gemm_alignment_class(reinterpret_cast<void*>(0x1008)), 8u);
  EXPECT_EQ(gemm_alignment_class(reinterpret_cast<void*>(0x1004)), 4u);
  EXPECT_EQ(gemm_alignment_class(reinterpret_cast<void*>(0x1002)), 2u);
  EXPECT_EQ(gemm_alignment_class(reinterpret_cast<void*>(0x1001)), 1u);
}

TEST(GemmAlgoCache, PathComesFromTheEnvironment) {
  {
    ScopedEnv cache("FTUNE_GEMM_CACHE", "/some/where/algos.json");
    EXPECT_EQ(gemm_cache_path(), "/some/where/algos.json");
  }
  {
    ScopedEnv cache("FTUNE_GEMM_CACHE", "");
    EXPECT_EQ(gemm_cache_path(), "");  // no file
  }
  ScopedEnv cache("FTUNE_GEMM_CACHE", nullptr);
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg/cache");
    EXPECT_EQ(gemm_cache_path(), "/xdg/cache/ftune/gemm_algorithms.json");
  }
  ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
  {
    ScopedEnv home("HOME", "/home/someone");
    EXPECT_EQ(gemm_cache_path(), "/home/someone/.cache/ftune/gemm_algorithms.json");
  }
  ScopedEnv home("HOME", nullptr);
  EXPECT_EQ(gemm_cache_path(), "");
}

TEST(GemmAlgoCache, EntriesCountForDoctor) {
  TempDir dir;
  const std::string path = dir.path() + "/gemm.json";
  ScopedEnv cache("FTUNE_GEMM_CACHE", path.c_str());
  EXPECT_EQ(gemm_cache_entries(), 0u);
  GemmAlgoCache a(path);
  a.put(key(1), entry(1));
  a.put(key(2), entry(2));
  ASSERT_FALSE(a.save());
  EXPECT_EQ(gemm_cache_entries(), 2u);
  write_text(path, "not json");
  EXPECT_EQ(gemm_cache_entries(), 0u);
}

TEST(GemmAlgoCache, AutotuneSwitchFromTheEnvironment) {
  {
    ScopedEnv v("FTUNE_GEMM_AUTOTUNE", nullptr);
    EXPECT_TRUE(gemm_autotune_enabled());
  }
  for (const char* off : {"0", "false", "off", "no"}) {
    ScopedEnv v("FTUNE_GEMM_AUTOTUNE", off);
    EXPECT_FALSE(gemm_autotune_enabled()) << off;
  }
  ScopedEnv v("FTUNE_GEMM_AUTOTUNE", "1");
  EXPECT_TRUE(gemm_autotune_enabled());
}

}  // namespace
}  // namespace ftune::cuda
