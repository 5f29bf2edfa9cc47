// The timed choice of cuBLASLt algorithms (gemm.h: set_gemm_autotune): per new call key the
// heuristic's candidates are timed in place on the call as it runs and the fastest is kept, in
// memory for the process and in the cache file (gemm_algo_cache.h) for later runs; choices made
// during a CUDA graph capture use the heuristic's first and are not kept.
#include <atomic>
#include <memory>
#include <unordered_map>

#include "core/memory.h"
#include "cuda/gemm_algo_cache.h"
#include "cuda/gemm_lt.cuh"

namespace ftune::cuda::lt {
namespace {

constexpr int kTuneCandidates = 8;        // heuristic candidates timed per new shape
constexpr float kTuneTargetMs = 2.0f;     // timed repetitions per candidate fill about this
constexpr int kTuneMinReps = 3, kTuneMaxReps = 20;

// The choice of algorithms, process-wide, under tune_mutex(): the file cache (loaded on first need),
// the choice per call key (shared by every thread), counters. Only a key's first call in a thread
// takes the lock; every later call reads its thread's LtPlan.
struct Choice {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
  std::string why;
};
struct Tuner {
  bool enabled = gemm_autotune_enabled();
  std::unique_ptr<GemmAlgoCache> file;  // null until first needed
  bool dirty = false;                   // shapes timed since the last save
  bool save_failed = false;             // warn once, then keep the choices in memory only
  bool announced = false;               // the one info line before the first timing
  int timed = 0, from_cache = 0, heuristic = 0;
  std::unordered_map<GemmCallKey, Choice, GemmCallKeyHash> chosen;
};
Tuner& tuner() {
  static Tuner t;
  return t;
}
std::atomic<uint64_t> g_generation{1};

GemmAlgoKey file_key(const DeviceBlas& blas, const GemmArgs& g, bool tf32) {
  GemmAlgoKey k;
  k.device = blas.name;
  k.sm = blas.sm;
  k.cublaslt_version = static_cast<int64_t>(cublasLtGetVersion());
  k.trans_a = g.trans_a;
  k.trans_b = g.trans_b;
  k.M = gemm_size_bucket(g.M);
  k.N = gemm_size_bucket(g.N);
  k.K = gemm_size_bucket(g.K);
  k.lda = g.lda;
  k.ldb = g.ldb;
  k.ldc = g.ldc;
  k.a_type = g.a_type;
  k.b_type = g.b_type;
  k.c_type = g.c_type;
  k.bias_type = g.epilogue == GemmEpilogue::Bias ? g.bias_type : DType::F32;
  k.epilogue = g.epilogue;
  k.tf32 = tf32;
  k.align_a = gemm_alignment_class(g.A);
  k.align_b = gemm_alignment_class(g.B);
  k.align_c = gemm_alignment_class(g.C);
  k.align_bias = gemm_alignment_class(g.epilogue == GemmEpilogue::BgradOpA
                                          ? static_cast<const void*>(g.bias_grad)
                                          : g.bias);
  return k;
}

// Up to `count` (<= kTuneCandidates) usable candidates from the heuristic, best first (state
// SUCCESS, within the workspace). (A fixed array, not a std::vector: nvcc 13's front end fails on
// std::vector of cuBLASLt's result struct.)
struct Candidates {
  cublasLtMatmulHeuristicResult_t r[kTuneCandidates] = {};
  int n = 0;
};
LtResult heuristic_candidates(const DeviceBlas& blas, LtPlan& p, const GemmAlgoKey& key,
                              int count, Candidates* out) {
  Preference pref;
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(kGemmWorkspaceBytes));
  // cuBLASLt's A is our B and vice versa.
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c);
  Candidates all;
  if (count > kTuneCandidates) count = kTuneCandidates;
  int returned = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
      blas.handle, p.desc.d, p.la.l, p.lb.l, p.lc.l, p.lc.l, pref.p, count, all.r, &returned);
  // NOT_SUPPORTED: no algorithm for this problem (e.g. an epilogue this type combination cannot
  // fuse); INVALID_VALUE: the arguments are wrong (an error, never a fallback).
  if (st != CUBLAS_STATUS_SUCCESS) return lt_result(st, "cublasLtMatmulAlgoGetHeuristic");
  out->n = 0;
  for (int i = 0; i < returned; ++i)
    if (all.r[i].state == CUBLAS_STATUS_SUCCESS && all.r[i].workspaceSize <= kGemmWorkspaceBytes)
      out->r[out->n++] = all.r[i];
  if (out->n == 0)
    return LtResult{LtStatus::NotSupported, "cublasLtMatmulAlgoGetHeuristic: no algorithm offered"};
  return {};
}

// The bytes a row-major (rows, cols) matrix with leading dimension ld spans.
size_t span_bytes(int64_t rows, int64_t cols, int64_t ld, DType t) {
  return static_cast<size_t>((rows - 1) * ld + cols) * dtype_size(t);
}

// Where the timing runs read C and write D: always in place (C == D) with the call's own beta,
// as the real call runs, so the algorithm chosen is timed on the call as it runs (timed out of
// place, D apart from C, the accumulating attention-output dW of gemm_bench ran at 0.85x the
// heuristic's first choice on an H200, bench/results/gpu). With beta == 0, C
// is a pure output that the real call overwrites right after timing, and so is bias_grad
// (written, never accumulated): the runs use the caller's buffers, which costs no memory. With
// beta != 0 the runs would accumulate into the caller's C: they use a scratch copy of C instead,
// allocated here and freed when the object goes away. Its pointer has exactly the alignment class
// of C, so the algorithm timed on it is valid for the real call.
class TuneTarget {
 public:
  TuneTarget(int device, const GemmArgs& g) : device_(device) {
    if (g.beta == 0.0f) {
      d = g.C;
      return;
    }
    bytes_ = span_bytes(g.M, g.N, g.ldc, g.c_type) + 16;
    base_ = static_cast<char*>(device_malloc(Device::cuda(device), bytes_));
    // base_ is 256-aligned; adding the class (1..8) gives exactly that alignment.
    const uint32_t c = gemm_alignment_class(g.C);
    d = base_ + (c < 16 ? c : 0);
    // Realistic values (the accumulated gradient), copied on the stream the timing runs on.
    FTUNE_CUDA_CHECK(cudaMemcpyAsync(d, g.C, span_bytes(g.M, g.N, g.ldc, g.c_type),
                                     cudaMemcpyDeviceToDevice, compute_stream()));
  }
  ~TuneTarget() {
    if (base_) device_free(Device::cuda(device_), base_, bytes_);
  }
  TuneTarget(const TuneTarget&) = delete;
  TuneTarget& operator=(const TuneTarget&) = delete;

  void* d = nullptr;

 private:
  int device_;
  char* base_ = nullptr;
  size_t bytes_ = 0;
};

// Times each candidate (a warm-up run, then repetitions between two events on the compute
// stream) and returns the fastest in *best. A candidate cuBLASLt refuses to run is skipped; when
// none ran, the most serious of the refusals (InvalidValue, an error, before NOT_SUPPORTED).
LtResult time_candidates(const DeviceBlas& blas, LtPlan& p, const GemmArgs& g,
                         const Candidates& candidates, const TuneTarget& target, Choice* best,
                         double* best_us, int* timed) {
  EventPair ev;
  cudaStream_t stream = compute_stream();
  float best_ms = 0.0f;
  *timed = 0;
  LtResult refusal{LtStatus::NotSupported, "every candidate refused to run"};
  // The most serious answer wins: InvalidValue, then any other failure, then NotSupported.
  const auto rank = [](LtStatus s) {
    return s == LtStatus::InvalidValue ? 2 : s == LtStatus::Failed ? 1 : 0;
  };
  auto note = [&](cublasStatus_t st) {
    LtResult r = lt_result(st, "cublasLtMatmul (timing a candidate)");
    if (rank(r.status) >= rank(refusal.status)) refusal = std::move(r);
  };
  for (int ci = 0; ci < candidates.n; ++ci) {
    const cublasLtMatmulAlgo_t& algo = candidates.r[ci].algo;
    // Warm-up run, timed to choose the repetitions.
    FTUNE_CUDA_CHECK(cudaEventRecord(ev.start, stream));
    if (const cublasStatus_t st = p.run(blas, g, algo, target.d, target.d);
        st != CUBLAS_STATUS_SUCCESS) {
      note(st);
      continue;
    }
    FTUNE_CUDA_CHECK(cudaEventRecord(ev.stop, stream));
    FTUNE_CUDA_CHECK(cudaEventSynchronize(ev.stop));
    float warm_ms = 0.0f;
    FTUNE_CUDA_CHECK(cudaEventElapsedTime(&warm_ms, ev.start, ev.stop));
    int reps = warm_ms > 0.0f ? static_cast<int>(kTuneTargetMs / warm_ms) : kTuneMaxReps;
    reps = reps < kTuneMinReps ? kTuneMinReps : (reps > kTuneMaxReps ? kTuneMaxReps : reps);
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    FTUNE_CUDA_CHECK(cudaEventRecord(ev.start, stream));
    for (int r = 0; r < reps && st == CUBLAS_STATUS_SUCCESS; ++r)
      st = p.run(blas, g, algo, target.d, target.d);
    FTUNE_CUDA_CHECK(cudaEventRecord(ev.stop, stream));
    FTUNE_CUDA_CHECK(cudaEventSynchronize(ev.stop));
    if (st != CUBLAS_STATUS_SUCCESS) {
      note(st);
      continue;
    }
    float ms = 0.0f;
    FTUNE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
    ms /= static_cast<float>(reps);
    ++*timed;
    if (!best->found || ms < best_ms) {
      best->found = true;
      best->algo = algo;
      best_ms = ms;
    }
  }
  *best_us = best_ms * 1000.0;
  return best->found ? LtResult{} : refusal;
}

}  // namespace

std::mutex& tune_mutex() {
  static std::mutex mu;
  return mu;
}

uint64_t plan_generation() { return g_generation.load(std::memory_order_acquire); }

void remember_refusal(const GemmCallKey& key, const std::string& why) {
  tuner().chosen[key] = Choice{false, {}, why};
}

// The algorithm for a key seen for the first time in this thread: chosen before in this process,
// else from the cache file (re-validated), else timed, else the heuristic's first choice. A "not
// supported" answer is remembered like a choice; an error is returned and not remembered. Caller
// holds tune_mutex(). A choice made while the stream is being captured (heuristic only) is not
// remembered, so that the key is timed when it next runs eagerly.
LtResult choose_algo(const DeviceBlas& blas, LtPlan& p, const GemmArgs& g, const GemmCallKey& ck,
                     bool capturing) {
  Tuner& t = tuner();
  if (auto it = t.chosen.find(ck); it != t.chosen.end()) {
    p.found = it->second.found;
    p.algo = it->second.algo;
    p.why = it->second.why;
    return {};
  }
  const GemmAlgoKey key = file_key(blas, g, ck.tf32 != 0);
  const auto remember = [&](const Choice& c) {
    p.found = c.found;
    p.algo = c.algo;
    p.why = c.why;
    if (!capturing) t.chosen.emplace(ck, c);
  };

  if (t.enabled && !capturing) {
    if (!t.file) {
      t.file = std::make_unique<GemmAlgoCache>(gemm_cache_path());
      t.file->load();
    }
    if (const GemmAlgoEntry* e = t.file->find(key)) {
      Choice c;
      static_assert(sizeof(c.algo.data) == sizeof(e->algo), "cublasLtMatmulAlgo_t is 8 uint64");
      for (size_t i = 0; i < e->algo.size(); ++i) c.algo.data[i] = e->algo[i];
      cublasLtMatmulHeuristicResult_t check{};
      const cublasStatus_t st = cublasLtMatmulAlgoCheck(blas.handle, p.desc.d, p.la.l, p.lb.l,
                                                        p.lc.l, p.lc.l, &c.algo, &check);
      if (st == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= kGemmWorkspaceBytes) {
        c.found = true;
        ++t.from_cache;
        gemm_autotune_log(describe_gemm(g) + ": from the cache file (" + us_text(e->time_us) +
                          ")");
        remember(c);
        return {};
      }
      gemm_autotune_log(describe_gemm(g) + ": the cached algorithm no longer fits (" +
                        cublasLtGetStatusName(st) + "); choosing again");
    }
  }

  Candidates candidates;
  const LtResult h = heuristic_candidates(blas, p, key,
                                          t.enabled && !capturing ? kTuneCandidates : 1,
                                          &candidates);
  if (h.status == LtStatus::NotSupported) {
    remember(Choice{false, {}, h.detail});  // the caller falls back, now and next time
    return h;
  }
  if (h.status != LtStatus::Success) return h;
  Choice c{true, candidates.r[0].algo, {}};
  if (!t.enabled || capturing || candidates.n == 1) {
    ++t.heuristic;
    remember(c);
    return {};
  }
  if (!t.announced) {
    t.announced = true;
    const std::string& path = t.file->path();
    gemm_autotune_log("timing cuBLASLt's candidates for each new GEMM shape (once; cache file " +
                          (path.empty() ? std::string("none") : path) +
                          ", FTUNE_GEMM_AUTOTUNE=0 turns this off)",
                      true);
  }
  std::unique_ptr<TuneTarget> target;
  try {
    target = std::make_unique<TuneTarget>(blas.index, g);
  } catch (const OutOfMemoryError& e) {
    gemm_autotune_log(describe_gemm(g) + ": no scratch memory for timing (" + e.what() +
                      "); the heuristic's first choice");
    ++t.heuristic;
    remember(c);
    return {};
  }
  double best_us = 0;
  int timed = 0;
  Choice best;
  const LtResult r = time_candidates(blas, p, g, candidates, *target, &best, &best_us, &timed);
  target.reset();
  if (r.status == LtStatus::NotSupported) {
    remember(Choice{false, {}, r.detail});
    return r;
  }
  if (r.status != LtStatus::Success) return r;
  ++t.timed;
  gemm_autotune_log(describe_gemm(g) + ": " + std::to_string(timed) +
                    " candidates timed, best " + us_text(best_us));
  GemmAlgoEntry entry;
  for (size_t i = 0; i < entry.algo.size(); ++i) entry.algo[i] = best.algo.data[i];
  entry.time_us = best_us;
  entry.candidates = timed;
  t.file->put(key, entry);
  t.dirty = true;
  remember(best);
  return {};
}

}  // namespace ftune::cuda::lt

namespace ftune::cuda {

using lt::tune_mutex;
using lt::Tuner;
using lt::tuner;

void set_gemm_autotune(bool enabled) {
  std::lock_guard<std::mutex> lock(tune_mutex());
  tuner().enabled = enabled;
  tuner().chosen.clear();
  lt::g_generation.fetch_add(1, std::memory_order_acq_rel);
}

bool gemm_autotune() {
  std::lock_guard<std::mutex> lock(tune_mutex());
  return tuner().enabled;
}

std::string gemm_autotune_summary() {
  std::lock_guard<std::mutex> lock(tune_mutex());
  const Tuner& t = tuner();
  return "gemm autotune: " + std::to_string(t.timed) + " shapes timed, " +
         std::to_string(t.from_cache) + " from cache, " + std::to_string(t.heuristic) +
         " heuristic only" + (t.enabled ? "" : " (autotune off)");
}

void gemm_autotune_save() {
  std::lock_guard<std::mutex> lock(tune_mutex());
  Tuner& t = tuner();
  if (!t.file || !t.dirty || t.save_failed) return;
  if (t.file->save()) t.save_failed = true;  // warned by save(); the choices stay in memory
  t.dirty = false;
}

}  // namespace ftune::cuda
