// Row-major GEMMs through cuBLASLt (see gemm.h): the per-thread plans (descriptors + algorithm)
// on a small struct key, the timed choice of algorithm with its cache file (gemm_algo_cache.h),
// and the cuBLASLt backend of the path policy (gemm_path.h; the fallback kernels are in
// gemm_fallback.cu).
//
// cuBLASLt is column-major: a row-major (M, N) matrix with leading dimension ld is the
// column-major (N, M) matrix with the same ld, so row-major C = op(A) op(B) is computed as
// column-major C^T = op(B)^T op(A)^T, i.e. cuBLASLt's (m, n, k) = (N, M, K) with A and B swapped.
// Consequences for the epilogues:
//   - a bias over our N columns is a bias over the rows of cuBLASLt's D: CUBLASLT_EPILOGUE_BIAS;
//   - BGRADB reduces cuBLASLt's B (our op(A)^T, (K, M)) over k: bias_grad[i] = sum_k op(A)[i, k]
//     (our BgradOpA).
#include <cublasLt.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/memory.h"
#include "core/op_profile.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_device.h"
#include "cuda/gemm.h"
#include "cuda/gemm_algo_cache.h"
#include "cuda/gemm_fallback.h"
#include "cuda/gemm_path.h"
#include "cuda/streams.cuh"

namespace ftune::cuda {
namespace {

std::atomic<bool> g_tf32{false};

constexpr int kMaxDevices = 64;
constexpr int kTuneCandidates = 8;        // heuristic candidates timed per new shape
constexpr float kTuneTargetMs = 2.0f;     // timed repetitions per candidate fill about this
constexpr int kTuneMinReps = 3, kTuneMaxReps = 20;

std::string us_text(double us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f us", us);
  return buf;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: break;
  }
  throw DeviceError("gemm: no cuBLASLt type for " + std::string(dtype_name(t)));
}

cublasLtEpilogue_t lt_epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::None: return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::BgradOpA: return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// What a cuBLASLt status means for the path policy (gemm_path.h).
LtResult lt_result(cublasStatus_t st, const char* step) {
  LtResult r;
  if (st == CUBLAS_STATUS_SUCCESS) return r;
  r.status = st == CUBLAS_STATUS_NOT_SUPPORTED ? LtStatus::NotSupported
             : st == CUBLAS_STATUS_INVALID_VALUE ? LtStatus::InvalidValue
                                                  : LtStatus::Failed;
  r.detail = std::string(step) + ": " + cublasLtGetStatusName(st);
  return r;
}

// The handle and workspace of a device: created once (under the mutex), then read without a lock.
struct DeviceBlas {
  int index = 0;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::string name;  // for the cache file's key
  int sm = 0;
};
std::mutex g_blas_mu;
std::array<std::atomic<DeviceBlas*>, kMaxDevices> g_blas{};

// Created once per device and kept for the life of the process (destroying a cuBLASLt handle at
// static destruction time, after the CUDA runtime may have shut down, is not safe).
DeviceBlas& device_blas(int device) {
  if (device < 0 || device >= kMaxDevices)
    throw DeviceError("gemm: CUDA device index " + std::to_string(device) + " out of range");
  if (DeviceBlas* b = g_blas[device].load(std::memory_order_acquire)) return *b;
  std::lock_guard<std::mutex> lock(g_blas_mu);
  if (DeviceBlas* b = g_blas[device].load(std::memory_order_relaxed)) return *b;
  auto blas = std::make_unique<DeviceBlas>();
  blas->index = device;
  FTUNE_CUDA_CHECK(cudaSetDevice(device));
  FTUNE_CUBLAS_CHECK(cublasLtCreate(&blas->handle));
  blas->workspace = device_malloc(Device::cuda(device), kGemmWorkspaceBytes);
  const DeviceCapabilities caps = device_capabilities(Device::cuda(device));
  blas->name = caps.name;
  blas->sm = caps.major * 10 + caps.minor;
  g_blas[device].store(blas.get(), std::memory_order_release);
  return *blas.release();
}

int current_device() {
  int device = 0;
  FTUNE_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// Owning wrappers so an exception between create and destroy leaks nothing.
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  explicit MatmulDesc(cublasComputeType_t compute) {
    FTUNE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d, compute, CUDA_R_32F));
  }
  ~MatmulDesc() { cublasLtMatmulDescDestroy(d); }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  template <typename T>
  void set(cublasLtMatmulDescAttributes_t attr, const T& value) {
    FTUNE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof(value)));
  }
};

struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  Layout(DType type, int64_t rows, int64_t cols, int64_t ld) {
    FTUNE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, cuda_type(type), static_cast<uint64_t>(rows),
                                                  static_cast<uint64_t>(cols), ld));
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(l); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  Preference() { FTUNE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p)); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(p); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  template <typename T>
  void set(cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
    FTUNE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attr, &value, sizeof(value)));
  }
};

struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    FTUNE_CUDA_CHECK(cudaEventCreate(&start));
    FTUNE_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

// The cuBLASLt objects of one call key, built on its first call in a thread and kept: the
// descriptors, and the algorithm chosen for the key (or why there is none). Column-major terms:
// cuBLASLt's A is our B, its B our A, C = D.
struct LtPlan {
  MatmulDesc desc;
  Layout la, lb, lc;
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
  std::string why;  // when !found: cuBLASLt's answer

  LtPlan(const GemmArgs& g, bool tf32)
      : desc(tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F),
        // Stored (column-major) shapes: cuBLASLt's A is (N, K) or (K, N), its B (K, M) or (M, K).
        la(g.b_type, g.trans_b ? g.K : g.N, g.trans_b ? g.N : g.K, g.ldb),
        lb(g.a_type, g.trans_a ? g.M : g.K, g.trans_a ? g.K : g.M, g.lda),
        lc(g.c_type, g.N, g.M, g.ldc) {
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(g.epilogue));
    if (g.epilogue == GemmEpilogue::Bias)
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(cuda_type(g.bias_type)));
    if (g.epilogue == GemmEpilogue::BgradOpA)
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_32F));
  }

  // The call's epilogue vector (cuBLASLt's heuristic also reads its alignment from here): set on
  // every call, the pointer changes while the key does not.
  void set_pointers(const GemmArgs& g) {
    if (g.epilogue == GemmEpilogue::Bias) desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
    if (g.epilogue == GemmEpilogue::BgradOpA)
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(g.bias_grad));
  }

  // D = alpha * op(A) op(B) + beta * C. The real call runs in place (C == D, as cublasSgemm);
  // the autotuner's timing runs may point both at a scratch copy of C (TuneTarget).
  cublasStatus_t run(const DeviceBlas& blas, const GemmArgs& g, const cublasLtMatmulAlgo_t& a,
                     const void* C, void* D) {
    return cublasLtMatmul(blas.handle, desc.d, &g.alpha, g.B, la.l, g.A, lb.l, &g.beta, C, lc.l,
                          D, lc.l, &a, blas.workspace, kGemmWorkspaceBytes, compute_stream());
  }
};

// The choice of algorithms, process-wide, under g_tune_mu: the file cache (loaded on first need),
// the choice per call key (shared by every thread), counters. Only a key's first call in a thread
// takes the lock; every later call reads its thread's LtPlan.
std::mutex g_tune_mu;
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
// Bumped when the choices are forgotten (set_gemm_autotune): threads drop their plans.
std::atomic<uint64_t> g_generation{1};

struct ThreadPlans {
  uint64_t generation = 0;
  std::unordered_map<GemmCallKey, std::unique_ptr<LtPlan>, GemmCallKeyHash> plans;
};
thread_local ThreadPlans t_plans;

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

bool stream_capturing() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FTUNE_CUDA_CHECK(cudaStreamIsCapturing(compute_stream(), &status));
  return status != cudaStreamCaptureStatusNone;
}

// The algorithm for a key seen for the first time in this thread: chosen before in this process,
// else from the cache file (re-validated), else timed, else the heuristic's first choice. A "not
// supported" answer is remembered like a choice; an error is returned and not remembered. Caller
// holds g_tune_mu. A choice made while the stream is being captured (heuristic only) is not
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

// cuBLASLt as the backend of the path policy (gemm_path.h).
class CublasLtBackend final : public GemmBackend {
 public:
  LtResult lt_matmul(const GemmArgs& g, const GemmCallKey& key) override {
    DeviceBlas& blas = device_blas(key.device);
    const uint64_t generation = g_generation.load(std::memory_order_acquire);
    if (t_plans.generation != generation) {
      t_plans.plans.clear();
      t_plans.generation = generation;
    }
    LtPlan* plan = nullptr;
    std::unique_ptr<LtPlan> unkept;  // a plan chosen during a capture is used once, not kept
    if (auto it = t_plans.plans.find(key); it != t_plans.plans.end()) {
      plan = it->second.get();
      plan->set_pointers(g);
    } else {
      auto p = std::make_unique<LtPlan>(g, key.tf32 != 0);
      p->set_pointers(g);
      const bool capturing = stream_capturing();
      LtResult r;
      {
        std::lock_guard<std::mutex> lock(g_tune_mu);
        r = choose_algo(blas, *p, g, key, capturing);
      }
      if (r.status != LtStatus::Success && r.status != LtStatus::NotSupported) return r;
      plan = p.get();
      if (capturing)
        unkept = std::move(p);
      else
        t_plans.plans.emplace(key, std::move(p));
    }
    if (!plan->found) return LtResult{LtStatus::NotSupported, plan->why};
    // C is both the input (beta) and the output D, as in cublasSgemm.
    const cublasStatus_t st = plan->run(blas, g, plan->algo, g.C, g.C);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
      // The heuristic offered an algorithm the library then refuses for this call: remember
      // that (this thread and the process), so the fallback runs without asking again.
      LtResult r = lt_result(st, "cublasLtMatmul");
      plan->found = false;
      plan->why = r.detail;
      std::lock_guard<std::mutex> lock(g_tune_mu);
      tuner().chosen[key] = Choice{false, {}, r.detail};
      return r;
    }
    return lt_result(st, "cublasLtMatmul");
  }
  void naive(const GemmArgs& plain) override { gemm_naive(plain); }
  void unfused_epilogue(const GemmArgs& g) override { gemm_unfused_epilogue(g); }
};

}  // namespace

void gemm_init(int device) {
  device_blas(device);
}

void set_gemm_tf32(bool enabled) {
  g_tf32.store(enabled, std::memory_order_relaxed);
}

bool gemm_tf32() {
  return g_tf32.load(std::memory_order_relaxed);
}

void set_gemm_autotune(bool enabled) {
  std::lock_guard<std::mutex> lock(g_tune_mu);
  tuner().enabled = enabled;
  tuner().chosen.clear();
  g_generation.fetch_add(1, std::memory_order_acq_rel);
}

bool gemm_autotune() {
  std::lock_guard<std::mutex> lock(g_tune_mu);
  return tuner().enabled;
}

std::string gemm_autotune_summary() {
  std::lock_guard<std::mutex> lock(g_tune_mu);
  const Tuner& t = tuner();
  return "gemm autotune: " + std::to_string(t.timed) + " shapes timed, " +
         std::to_string(t.from_cache) + " from cache, " + std::to_string(t.heuristic) +
         " heuristic only" + (t.enabled ? "" : " (autotune off)");
}

void gemm_autotune_save() {
  std::lock_guard<std::mutex> lock(g_tune_mu);
  Tuner& t = tuner();
  if (!t.file || !t.dirty || t.save_failed) return;
  if (t.file->save()) t.save_failed = true;  // warned by save(); the choices stay in memory
  t.dirty = false;
}

void gemm(const GemmArgs& g) {
  const bool tf32 = g.a_type == DType::F32 && g_tf32.load(std::memory_order_relaxed);
  const profile::OpScope scope("gemm", Device::cuda(0));  // the kind is what counts
  CublasLtBackend backend;
  run_gemm(g, tf32, current_device(), backend);
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
          const float* bias) {
  GemmArgs g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.M = M;
  g.N = N;
  g.K = K;
  g.alpha = alpha;
  g.beta = beta;
  g.A = A;
  g.lda = lda;
  g.B = B;
  g.ldb = ldb;
  g.C = C;
  g.ldc = ldc;
  g.epilogue = bias ? GemmEpilogue::Bias : GemmEpilogue::None;
  g.bias = bias;
  gemm(g);
}

}  // namespace ftune::cuda
