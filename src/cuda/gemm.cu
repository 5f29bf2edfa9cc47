// Row-major GEMMs through cuBLASLt (see gemm.h): descriptors, fused epilogues, the timed choice of
// algorithm with its cache file (gemm_algo_cache.h), and the unfused / naive fallbacks.
//
// cuBLASLt is column-major: a row-major (M, N) matrix with leading dimension ld is the
// column-major (N, M) matrix with the same ld, so row-major C = op(A) op(B) is computed as
// column-major C^T = op(B)^T op(A)^T, i.e. cuBLASLt's (m, n, k) = (N, M, K) with A and B swapped.
// Consequences for the epilogues:
//   - a bias over our N columns is a bias over the rows of cuBLASLt's D: CUBLASLT_EPILOGUE_BIAS;
//   - the GELU aux matrix has D's layout: row-major (M, N) with ld = ldaux;
//   - DGELU_BGRAD's bias gradient is over D's rows (cuBLASLt), i.e. our column sums of D;
//   - BGRADA reduces cuBLASLt's A (our op(B)^T, (N, K)) over k: bias_grad[j] = sum_k op(B)[k, j]
//     (our Bgrad); BGRADB reduces cuBLASLt's B (our op(A)^T, (K, M)) over k:
//     bias_grad[i] = sum_k op(A)[i, k] (our BgradOpA).
#include <cublasLt.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/memory.h"
#include "core/op_profile.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_device.h"
#include "cuda/gemm.h"
#include "cuda/gemm_algo_cache.h"
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
    case GemmEpilogue::GeluBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GemmEpilogue::DGelu: return CUBLASLT_EPILOGUE_DGELU;
    case GemmEpilogue::DGeluBgrad: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case GemmEpilogue::Bgrad: return CUBLASLT_EPILOGUE_BGRADA;
    case GemmEpilogue::BgradOpA: return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool uses_aux(GemmEpilogue e) {
  return e == GemmEpilogue::GeluBias || e == GemmEpilogue::DGelu || e == GemmEpilogue::DGeluBgrad;
}
bool writes_bias_grad(GemmEpilogue e) {
  return e == GemmEpilogue::DGeluBgrad || e == GemmEpilogue::Bgrad || e == GemmEpilogue::BgradOpA;
}

struct CachedAlgo {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

struct DeviceBlas {
  int index = 0;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::string name;  // for the cache key
  int sm = 0;
  std::map<std::string, CachedAlgo> chosen;  // by GemmAlgoKey::str(); guarded by g_tune_mu
};

// The choice of algorithms, process-wide: the file cache (loaded on first need) and counters.
std::mutex g_tune_mu;
struct Tuner {
  bool enabled = gemm_autotune_enabled();
  std::unique_ptr<GemmAlgoCache> file;  // null until first needed
  bool save_failed = false;             // warn once, then keep the choices in memory only
  bool announced = false;               // the one info line before the first timing
  int timed = 0, from_cache = 0, heuristic = 0;
};
Tuner& tuner() {
  static Tuner t;
  return t;
}

// Created once per device and kept for the life of the process (destroying a cuBLASLt handle at
// static destruction time, after the CUDA runtime may have shut down, is not safe).
std::mutex g_blas_mu;
std::array<DeviceBlas*, kMaxDevices> g_blas{};

DeviceBlas* existing_blas(int device) {
  std::lock_guard<std::mutex> lock(g_blas_mu);
  return g_blas[device];
}

DeviceBlas& device_blas(int device) {
  if (device < 0 || device >= kMaxDevices)
    throw DeviceError("gemm: CUDA device index " + std::to_string(device) + " out of range");
  std::lock_guard<std::mutex> lock(g_blas_mu);
  auto& all = g_blas;
  if (!all[device]) {
    auto blas = std::make_unique<DeviceBlas>();
    blas->index = device;
    FTUNE_CUDA_CHECK(cudaSetDevice(device));
    FTUNE_CUBLAS_CHECK(cublasLtCreate(&blas->handle));
    blas->workspace = device_malloc(Device::cuda(device), kGemmWorkspaceBytes);
    const DeviceCapabilities caps = device_capabilities(Device::cuda(device));
    blas->name = caps.name;
    blas->sm = caps.major * 10 + caps.minor;
    all[device] = blas.release();
  }
  return *all[device];
}

DeviceBlas& current_blas() {
  int device = 0;
  FTUNE_CUDA_CHECK(cudaGetDevice(&device));
  return device_blas(device);
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

// One cuBLASLt problem in column-major terms: cuBLASLt's A is our B, its B our A, C = D.
struct LtProblem {
  const GemmArgs& g;
  bool tf32;
  MatmulDesc desc;
  Layout la, lb, lc;

  LtProblem(const GemmArgs& args, bool tf32_math)
      : g(args),
        tf32(tf32_math),
        desc(tf32_math ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F),
        // Stored (column-major) shapes: cuBLASLt's A is (N, K) or (K, N), its B (K, M) or (M, K).
        la(args.b_type, args.trans_b ? args.K : args.N, args.trans_b ? args.N : args.K, args.ldb),
        lb(args.a_type, args.trans_a ? args.M : args.K, args.trans_a ? args.K : args.M, args.lda),
        lc(args.c_type, args.N, args.M, args.ldc) {
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, args.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, args.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(args.epilogue));
    // fp32 bias (or bias gradient) whatever D's type is.
    if (args.bias || writes_bias_grad(args.epilogue))
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_32F);
    if (uses_aux(args.epilogue)) desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, args.ldaux);
    set_pointers(args.aux, args.bias_grad);
  }

  // The epilogue's pointers (cuBLASLt's heuristic also reads their alignment from here).
  void set_pointers(void* aux, float* bias_grad) {
    if (g.epilogue == GemmEpilogue::Bias || g.epilogue == GemmEpilogue::GeluBias)
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(g.bias));
    if (writes_bias_grad(g.epilogue))
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(bias_grad));
    if (uses_aux(g.epilogue)) desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  }

  cublasStatus_t run(const DeviceBlas& blas, const cublasLtMatmulAlgo_t& algo, const void* C,
                     void* D) {
    return cublasLtMatmul(blas.handle, desc.d, &g.alpha, g.B, la.l, g.A, lb.l, &g.beta, C, lc.l, D,
                          lc.l, &algo, blas.workspace, kGemmWorkspaceBytes, compute_stream());
  }
};

// The in-process choice is per exact shape: the bucketed key plus the exact M, N, K.
std::string exact_key(const GemmAlgoKey& key, const GemmArgs& g) {
  return key.str() + " exact " + std::to_string(g.M) + "x" + std::to_string(g.N) + "x" +
         std::to_string(g.K);
}

GemmAlgoKey make_key(const DeviceBlas& blas, const GemmArgs& g, bool tf32) {
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
  k.ldaux = uses_aux(g.epilogue) ? g.ldaux : 0;
  k.a_type = g.a_type;
  k.b_type = g.b_type;
  k.c_type = g.c_type;
  k.epilogue = g.epilogue;
  k.tf32 = tf32;
  k.align_a = gemm_alignment_class(g.A);
  k.align_b = gemm_alignment_class(g.B);
  k.align_c = gemm_alignment_class(g.C);
  k.align_aux = uses_aux(g.epilogue) ? gemm_alignment_class(g.aux) : 0;
  k.align_bias = gemm_alignment_class(writes_bias_grad(g.epilogue)
                                          ? static_cast<const void*>(g.bias_grad)
                                          : static_cast<const void*>(g.bias));
  return k;
}

// Up to `count` (<= kTuneCandidates) usable candidates from the heuristic, best first (state
// SUCCESS, within the workspace); none when it offers none. (A fixed array, not a std::vector:
// nvcc 13's front end fails on std::vector of cuBLASLt's result struct.)
struct Candidates {
  cublasLtMatmulHeuristicResult_t r[kTuneCandidates] = {};
  int n = 0;
};
Candidates heuristic_candidates(const DeviceBlas& blas, LtProblem& p, const GemmAlgoKey& key,
                                int count) {
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
  // NOT_SUPPORTED means "no algorithm for this problem" (e.g. an epilogue this type combination
  // cannot fuse): the caller falls back.
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) returned = 0;
  else FTUNE_CUBLAS_CHECK(st);
  Candidates out;
  for (int i = 0; i < returned; ++i)
    if (all.r[i].state == CUBLAS_STATUS_SUCCESS && all.r[i].workspaceSize <= kGemmWorkspaceBytes)
      out.r[out.n++] = all.r[i];
  return out;
}

// The bytes a row-major (rows, cols) matrix with leading dimension ld spans.
size_t span_bytes(int64_t rows, int64_t cols, int64_t ld, DType t) {
  return static_cast<size_t>((rows - 1) * ld + cols) * dtype_size(t);
}

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

// Where the timing runs write D. With beta == 0, C is a pure output that the real call overwrites
// right after timing, and so are aux (GeluBias) and bias_grad (written, never accumulated): the
// runs write the caller's buffers, which costs no memory. With beta != 0, C is read and D
// accumulates into it, and a D that overlaps the aux input of DGelu* (an in-place GELU backward)
// would change that input between runs: then the runs write a scratch D the size of C instead,
// allocated here and freed when the object goes away. Its pointer has exactly the alignment class
// of C, so the algorithm timed on it is valid for the real call.
class TuneTarget {
 public:
  TuneTarget(int device, const GemmArgs& g) : device_(device) {
    const size_t c_bytes = span_bytes(g.M, g.N, g.ldc, g.c_type);
    const bool reads_aux =
        g.epilogue == GemmEpilogue::DGelu || g.epilogue == GemmEpilogue::DGeluBgrad;
    if (g.beta == 0.0f &&
        !(reads_aux && overlap(g.C, c_bytes, g.aux, span_bytes(g.M, g.N, g.ldaux, g.c_type)))) {
      d = g.C;
      return;
    }
    bytes_ = c_bytes + 16;
    base_ = static_cast<char*>(device_malloc(Device::cuda(device), bytes_));
    // base_ is 256-aligned; adding the class (1..8) gives exactly that alignment.
    const uint32_t c = gemm_alignment_class(g.C);
    d = base_ + (c < 16 ? c : 0);
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
// stream); returns the fastest (found == false if none ran).
CachedAlgo time_candidates(const DeviceBlas& blas, LtProblem& p, const Candidates& candidates,
                           const TuneTarget& target, double* best_us, int* timed) {
  const GemmArgs& g = p.g;
  EventPair ev;
  cudaStream_t stream = compute_stream();
  CachedAlgo best;
  float best_ms = 0.0f;
  *timed = 0;
  for (int ci = 0; ci < candidates.n; ++ci) {
    const cublasLtMatmulHeuristicResult_t& cand = candidates.r[ci];
    // Warm-up run, timed to choose the repetitions.
    FTUNE_CUDA_CHECK(cudaEventRecord(ev.start, stream));
    if (p.run(blas, cand.algo, g.C, target.d) != CUBLAS_STATUS_SUCCESS) continue;
    FTUNE_CUDA_CHECK(cudaEventRecord(ev.stop, stream));
    FTUNE_CUDA_CHECK(cudaEventSynchronize(ev.stop));
    float warm_ms = 0.0f;
    FTUNE_CUDA_CHECK(cudaEventElapsedTime(&warm_ms, ev.start, ev.stop));
    int reps = warm_ms > 0.0f ? static_cast<int>(kTuneTargetMs / warm_ms) : kTuneMaxReps;
    reps = reps < kTuneMinReps ? kTuneMinReps : (reps > kTuneMaxReps ? kTuneMaxReps : reps);
    bool ok = true;
    FTUNE_CUDA_CHECK(cudaEventRecord(ev.start, stream));
    for (int r = 0; r < reps && ok; ++r)
      ok = p.run(blas, cand.algo, g.C, target.d) == CUBLAS_STATUS_SUCCESS;
    FTUNE_CUDA_CHECK(cudaEventRecord(ev.stop, stream));
    FTUNE_CUDA_CHECK(cudaEventSynchronize(ev.stop));
    if (!ok) continue;
    float ms = 0.0f;
    FTUNE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
    ms /= static_cast<float>(reps);
    ++*timed;
    if (!best.found || ms < best_ms) {
      best.found = true;
      best.algo = cand.algo;
      best_ms = ms;
    }
  }
  *best_us = best_ms * 1000.0;
  return best;
}

bool stream_capturing() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FTUNE_CUDA_CHECK(cudaStreamIsCapturing(compute_stream(), &status));
  return status != cudaStreamCaptureStatusNone;
}

// The algorithm for this call: chosen before in this process, else from the cache file
// (re-validated), else timed, else the heuristic's first choice. Caller holds g_tune_mu.
CachedAlgo choose_algo(DeviceBlas& blas, LtProblem& p) {
  const GemmAlgoKey key = make_key(blas, p.g, p.tf32);
  const std::string ks = exact_key(key, p.g);
  if (auto it = blas.chosen.find(ks); it != blas.chosen.end()) return it->second;
  Tuner& t = tuner();
  CachedAlgo c;

  const bool capturing = stream_capturing();
  if (t.enabled && !capturing) {
    if (!t.file) {
      t.file = std::make_unique<GemmAlgoCache>(gemm_cache_path());
      t.file->load();
    }
    if (const GemmAlgoEntry* e = t.file->find(key)) {
      cublasLtMatmulAlgo_t algo{};
      static_assert(sizeof(algo.data) == sizeof(e->algo), "cublasLtMatmulAlgo_t is 8 uint64");
      for (size_t i = 0; i < e->algo.size(); ++i) algo.data[i] = e->algo[i];
      cublasLtMatmulHeuristicResult_t check{};
      const cublasStatus_t st = cublasLtMatmulAlgoCheck(blas.handle, p.desc.d, p.la.l, p.lb.l,
                                                        p.lc.l, p.lc.l, &algo, &check);
      if (st == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= kGemmWorkspaceBytes) {
        c.found = true;
        c.algo = algo;
        ++t.from_cache;
        gemm_autotune_log(ks + ": from the cache file (" + us_text(e->time_us) + ")");
        blas.chosen.emplace(ks, c);
        return c;
      }
      gemm_autotune_log(ks + ": the cached algorithm no longer fits (" +
                        cublasLtGetStatusName(st) + "); timing again");
    }
  }

  const auto candidates =
      heuristic_candidates(blas, p, key, t.enabled && !capturing ? kTuneCandidates : 1);
  if (candidates.n == 0) {
    blas.chosen.emplace(ks, c);  // no algorithm: the caller falls back, now and next time
    return c;
  }
  c.found = true;
  c.algo = candidates.r[0].algo;
  if (!t.enabled || capturing || candidates.n == 1) {
    ++t.heuristic;
    if (!capturing) blas.chosen.emplace(ks, c);
    return c;
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
    target = std::make_unique<TuneTarget>(blas.index, p.g);
  } catch (const OutOfMemoryError& e) {
    gemm_autotune_log(ks + ": no scratch memory for timing (" + e.what() +
                      "); the heuristic's first choice");
    ++t.heuristic;
    blas.chosen.emplace(ks, c);
    return c;
  }
  double best_us = 0;
  int timed = 0;
  const CachedAlgo best = time_candidates(blas, p, candidates, *target, &best_us, &timed);
  target.reset();
  if (!best.found) {
    // Every candidate failed to run (cuBLASLt offered what it cannot run): the unfused fallback.
    gemm_autotune_log(ks + ": no candidate ran; using the fallback");
    blas.chosen.emplace(ks, best);
    return best;
  }
  ++t.timed;
  gemm_autotune_log(ks + ": " + std::to_string(timed) + " candidates timed, best " +
                    us_text(best_us));
  GemmAlgoEntry entry;
  for (size_t i = 0; i < entry.algo.size(); ++i) entry.algo[i] = best.algo.data[i];
  entry.time_us = best_us;
  entry.candidates = timed;
  t.file->put(key, entry);
  if (!t.save_failed && t.file->save()) t.save_failed = true;
  blas.chosen.emplace(ks, best);
  return best;
}

// One cuBLASLt matmul with the args' epilogue; returns false (having done nothing) when cuBLASLt
// offers no algorithm for it.
bool try_cublaslt(const GemmArgs& g) {
  DeviceBlas& blas = current_blas();
  const bool tf32 = g.a_type == DType::F32 && g_tf32.load(std::memory_order_relaxed);
  LtProblem p(g, tf32);
  CachedAlgo chosen;
  {
    std::lock_guard<std::mutex> lock(g_tune_mu);
    chosen = choose_algo(blas, p);
  }
  if (!chosen.found) return false;
  // C is both the input (beta) and the output D, as in cublasSgemm.
  const cublasStatus_t st = p.run(blas, chosen.algo, g.C, g.C);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
    // The heuristic offered an algorithm the library then refuses for this call (seen with
    // epilogue / type combinations it does not fuse): remember that and fall back, now and later.
    std::lock_guard<std::mutex> lock(g_tune_mu);
    blas.chosen[exact_key(make_key(blas, g, tf32), g)] = CachedAlgo{};
    // Said once per shape at info level: a real argument error would otherwise hide here as a
    // slow path.
    gemm_autotune_log(describe_gemm(g) + ": cuBLASLt refused the chosen algorithm (" +
                          cublasLtGetStatusName(st) + "); the unfused fallback runs this shape",
                      true);
    return false;
  }
  FTUNE_CUBLAS_CHECK(st);
  return true;
}

// ---- Fallback kernels (fp32 math, any type, any alignment) ----

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(bf16_t x) {
  return bf16_to_float(x);
}
__device__ __forceinline__ float to_f32(f16_t x) {
  return f16_to_float(x);
}
template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16_t from_f32<bf16_t>(float x) {
  return float_to_bf16(x);
}
template <>
__device__ __forceinline__ f16_t from_f32<f16_t>(float x) {
  return float_to_f16(x);
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

__device__ __forceinline__ float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kGeluCoeff * x * x * x)));
}
__device__ __forceinline__ float gelu_tanh_grad(float x) {
  const float t = tanhf(kSqrt2OverPi * (x + kGeluCoeff * x * x * x));
  return 0.5f * (1.0f + t) +
         0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
}

// C[i, j] = alpha * sum_k op(A)[i, k] op(B)[k, j] + beta * C[i, j], one thread per output
// element, C not read when beta == 0 (it may hold NaN poison).
template <typename TA, typename TC>
__global__ void gemm_naive_kernel(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                  float alpha, const TA* A, int64_t lda, const TA* B, int64_t ldb,
                                  float beta, TC* C, int64_t ldc) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= M * N) return;
  const int64_t i = idx / N, j = idx % N;
  float sum = 0.0f;
  for (int64_t k = 0; k < K; ++k) {
    const float a = to_f32(trans_a ? A[k * lda + i] : A[i * lda + k]);
    const float b = to_f32(trans_b ? B[j * ldb + k] : B[k * ldb + j]);
    sum += a * b;
  }
  float v = alpha * sum;
  if (beta != 0.0f) v += beta * to_f32(C[i * ldc + j]);
  C[i * ldc + j] = from_f32<TC>(v);
}

// The unfused epilogues on an (M, N) C that holds P: bias, then GELU (aux = pre-activation), or
// the GELU backward (C *= gelu'(aux)).
enum class Pointwise { Bias, GeluBias, DGelu };
template <typename TC>
__global__ void epilogue_kernel(Pointwise op, TC* C, int64_t ldc, const float* bias, TC* aux,
                                int64_t ldaux, int64_t M, int64_t N) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < M * N;
       idx += stride) {
    const int64_t i = idx / N, j = idx % N;
    const float p = to_f32(C[i * ldc + j]);
    if (op == Pointwise::Bias) {
      C[i * ldc + j] = from_f32<TC>(p + bias[j]);
    } else if (op == Pointwise::GeluBias) {
      const float pre = p + bias[j];
      aux[i * ldaux + j] = from_f32<TC>(pre);
      C[i * ldc + j] = from_f32<TC>(gelu_tanh(pre));
    } else {
      C[i * ldc + j] = from_f32<TC>(p * gelu_tanh_grad(to_f32(aux[i * ldaux + j])));
    }
  }
}

// out[j] = sum over k < K of x[k * s_k + j * s_j], j < J (written, not accumulated). A block of
// 32 x 32 threads owns 32 outputs: thread (x, y) sums k = y, y + 32, ..., then the 32 partial sums
// of an output are added in y order: the same bits every run.
template <typename T>
__global__ void __launch_bounds__(1024)
    sum_over_k_kernel(float* out, const T* x, int64_t s_k, int64_t s_j, int64_t K, int64_t J) {
  __shared__ float partial[32][33];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc = 0.0f;
  if (j < J)
    for (int64_t k = threadIdx.y; k < K; k += 32) acc += to_f32(x[k * s_k + j * s_j]);
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < J) {
    float s = 0.0f;
    for (int k = 0; k < 32; ++k) s += partial[k][threadIdx.x];
    out[j] = s;
  }
}

// Calls f(T{}) with the element type of t (f32, bf16 or f16).
template <typename F>
void with_type(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); return;
    case DType::BF16: f(bf16_t{}); return;
    case DType::F16: f(f16_t{}); return;
    default: break;
  }
  throw DeviceError("gemm: unsupported element type " + std::string(dtype_name(t)));
}

void naive_gemm(const GemmArgs& g) {
  with_type(g.a_type, [&](auto a_tag) {
    with_type(g.c_type, [&](auto c_tag) {
      using TA = decltype(a_tag);
      using TC = decltype(c_tag);
      gemm_naive_kernel<TA, TC><<<grid_for(g.M * g.N, 256), 256, 0, compute_stream()>>>(
          g.trans_a, g.trans_b, g.M, g.N, g.K, g.alpha, static_cast<const TA*>(g.A), g.lda,
          static_cast<const TA*>(g.B), g.ldb, g.beta, static_cast<TC*>(g.C), g.ldc);
      FTUNE_CUDA_CHECK_LAUNCH();
    });
  });
}

void pointwise_epilogue(const GemmArgs& g, Pointwise op) {
  if (g.M == 0 || g.N == 0) return;
  with_type(g.c_type, [&](auto c_tag) {
    using TC = decltype(c_tag);
    epilogue_kernel<TC><<<grid_stride_blocks(g.M * g.N, 256), 256, 0, compute_stream()>>>(
        op, static_cast<TC*>(g.C), g.ldc, g.bias, static_cast<TC*>(g.aux), g.ldaux, g.M, g.N);
    FTUNE_CUDA_CHECK_LAUNCH();
  });
}

void sum_over_k(float* out, DType type, const void* x, int64_t s_k, int64_t s_j, int64_t K,
                int64_t J) {
  if (J == 0) return;
  with_type(type, [&](auto tag) {
    using T = decltype(tag);
    sum_over_k_kernel<T><<<grid_for(J, 32), dim3(32, 32), 0, compute_stream()>>>(
        out, static_cast<const T*>(x), s_k, s_j, K, J);
    FTUNE_CUDA_CHECK_LAUNCH();
  });
}

// The epilogue as separate kernels after the plain product already in C.
void unfused_epilogue(const GemmArgs& g) {
  switch (g.epilogue) {
    case GemmEpilogue::None: return;
    case GemmEpilogue::Bias: pointwise_epilogue(g, Pointwise::Bias); return;
    case GemmEpilogue::GeluBias: pointwise_epilogue(g, Pointwise::GeluBias); return;
    case GemmEpilogue::DGelu: pointwise_epilogue(g, Pointwise::DGelu); return;
    case GemmEpilogue::DGeluBgrad:
      pointwise_epilogue(g, Pointwise::DGelu);
      // Column sums of D (M, N): element (k = row, j = column).
      sum_over_k(g.bias_grad, g.c_type, g.C, g.ldc, 1, g.M, g.N);
      return;
    case GemmEpilogue::Bgrad:
      // op(B)[k, j] is B[k * ldb + j], or B[j * ldb + k] when B is stored transposed (N, K).
      sum_over_k(g.bias_grad, g.b_type, g.B, g.trans_b ? 1 : g.ldb, g.trans_b ? g.ldb : 1, g.K,
                 g.N);
      return;
    case GemmEpilogue::BgradOpA:
      // op(A)[i, k] is A[i * lda + k], or A[k * lda + i] when A is stored transposed (K, M).
      sum_over_k(g.bias_grad, g.a_type, g.A, g.trans_a ? g.lda : 1, g.trans_a ? 1 : g.lda, g.K,
                 g.M);
      return;
  }
}

// Whether cuBLASLt's epilogue may be tried for this call: it needs 16-byte aligned bias / bias
// gradient vectors and a 16-byte aligned aux matrix whose ld is a multiple of 8.
bool fusable(const GemmArgs& g) {
  auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (g.bias && !aligned16(g.bias)) return false;
  if (g.bias_grad && !aligned16(g.bias_grad)) return false;
  if (uses_aux(g.epilogue) && (!aligned16(g.aux) || g.ldaux % 8 != 0)) return false;
  return true;
}

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
  for (int d = 0; d < kMaxDevices; ++d)
    if (DeviceBlas* blas = existing_blas(d)) blas->chosen.clear();
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

void gemm(const GemmArgs& g) {
  check_gemm_args(g);
  const profile::OpScope scope("gemm", Device::cuda(0));  // the kind is what counts
  const bool product = g.M > 0 && g.N > 0 && g.K > 0;
  if (product && g.epilogue != GemmEpilogue::None && fusable(g) && try_cublaslt(g)) return;
  GemmArgs plain = g;
  plain.epilogue = GemmEpilogue::None;
  plain.bias = nullptr;
  plain.aux = nullptr;
  plain.ldaux = 0;
  plain.bias_grad = nullptr;
  if (g.M > 0 && g.N > 0 && !(product && try_cublaslt(plain))) naive_gemm(plain);
  unfused_epilogue(g);
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
