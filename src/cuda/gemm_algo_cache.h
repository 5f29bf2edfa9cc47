// The cuBLASLt algorithm cache kept in a file: which algorithm ran fastest for a GEMM key, so that
// the timing of the heuristic's candidates (cuda/gemm.cu) happens once per machine, not once per
// process. Plain C++ (no CUDA), built and tested everywhere; only gemm.cu fills it.
//
// The file is JSON: {"format": "ftune-gemm-algorithms", "version": 1, "entries": [{"key": {...},
// "algo": ["0x<16 hex digits>" x 8], "time_us": ..., "candidates": ...}, ...]}. An algorithm is
// cuBLASLt's opaque cublasLtMatmulAlgo_t (8 uint64), stored as hex strings so no JSON reader
// rounds them. Entries of other devices or cuBLASLt versions are kept (their keys never match).
//
// Many processes (HPO workers) share the file: save() re-reads it under an advisory lock
// (flock on "<path>.lock"), merges the entries other processes wrote meanwhile with this
// process's, and replaces the file atomically (temporary + rename). A corrupt file, or one of
// another format version, is a cache miss: load() returns a warning naming the file and what is
// wrong (also logged), and the next save() rebuilds the file. Nothing here throws for file
// problems.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "core/dtype.h"
#include "cuda/gemm.h"

namespace ftune::cuda {

constexpr int kGemmAlgoCacheVersion = 3;  // 2: M, N, K are size buckets; 3: bias type, no aux

// Everything cuBLASLt's choice of algorithm depends on. M, N and K are size buckets
// (gemm_size_bucket), not the exact sizes: with length-bucketed batches the token dimension takes
// a new value in most micro-batches of the first epoch, and timing every one of them would cost
// seconds and scratch memory well after the first step. Shapes of one bucket share the algorithm
// timed for the first of them, re-validated for each exact shape (cublasLtMatmulAlgoCheck).
struct GemmAlgoKey {
  std::string device;            // "NVIDIA H100 80GB HBM3"
  int sm = 0;                    // compute capability, 90 for 9.0
  int64_t cublaslt_version = 0;  // cublasLtGetVersion()
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  DType a_type = DType::F32, b_type = DType::F32, c_type = DType::F32;
  DType bias_type = DType::F32;  // of the bias (Bias) or the bias gradient (BgradOpA)
  GemmEpilogue epilogue = GemmEpilogue::None;
  bool tf32 = false;
  // Alignment class of each pointer: the largest power of two dividing it, at most 16 bytes
  // (what cuBLASLt's kernels can assume); 0 for a pointer the call does not pass.
  uint32_t align_a = 0, align_b = 0, align_c = 0, align_bias = 0;

  // One line that names every field; equal keys give equal strings and different keys different
  // ones (the map key of the cache).
  std::string str() const;
};

// d rounded up to one of four buckets per power of two (exact up to 64): 1000 -> 1024,
// 3000 -> 3072, 768 and 3072 stay; never more than 25% above d.
int64_t gemm_size_bucket(int64_t d);

// The largest power of two dividing the address, capped at 16; 0 for null.
uint32_t gemm_alignment_class(const void* p);

struct GemmAlgoEntry {
  std::array<uint64_t, 8> algo{};  // cublasLtMatmulAlgo_t::data
  double time_us = 0;              // measured time of one call
  int candidates = 0;              // how many candidates were timed
};

class GemmAlgoCache {
 public:
  // An empty path keeps the cache in memory only (load and save do nothing).
  explicit GemmAlgoCache(std::string path);

  const std::string& path() const { return path_; }

  // Adds the entries of the file. A missing file is an empty cache; a file that cannot be read or
  // parsed, has another format or version, or holds a malformed entry adds nothing and returns a
  // warning naming the file and the problem (also logged with spdlog::warn).
  std::optional<std::string> load();

  const GemmAlgoEntry* find(const GemmAlgoKey& key) const;
  // Records an entry found by this process (it wins over the file's entry for the same key).
  void put(const GemmAlgoKey& key, const GemmAlgoEntry& entry);
  size_t size() const { return entries_.size(); }

  // Writes the file: under the lock, the file's current entries merged with this process's
  // (this process's win for equal keys; a corrupt or foreign file is replaced), written atomically.
  // The in-memory cache learns the file's other entries too. On failure (unwritable directory,
  // ...) returns a warning naming the file (also logged); never throws.
  std::optional<std::string> save();

 private:
  std::string path_;
  std::map<std::string, std::pair<GemmAlgoKey, GemmAlgoEntry>> entries_;
  std::set<std::string> ours_;  // keys put() by this process
};

// Where the cache file is: $FTUNE_GEMM_CACHE when set (empty: no file), else
// $XDG_CACHE_HOME/ftune/gemm_algorithms.json, else ~/.cache/ftune/gemm_algorithms.json ("" when
// neither XDG_CACHE_HOME nor HOME is set). For `ftune doctor` too.
std::string gemm_cache_path();
// How many entries the cache file holds now (0 when it is missing or unreadable; no warning).
size_t gemm_cache_entries();
// A log line "gemm autotune: <message>", debug level unless `info` (gemm.cu cannot include spdlog:
// nvcc).
void gemm_autotune_log(const std::string& message, bool info = false);
// FTUNE_GEMM_AUTOTUNE: unset or anything but "0", "false", "off", "no" means on.
bool gemm_autotune_enabled();

}  // namespace ftune::cuda
