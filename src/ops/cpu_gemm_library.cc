// The CPU GEMM's library (see cpu_gemm_library.h): the run-time choice and the serial product
// through OpenBLAS's cblas_sgemm or oneDNN's dnnl_sgemm. oneDNN is loaded on first use (dlopen of
// libdnnl.so.2, $FTUNE_ONEDNN_LIBRARY), not linked: the build is the same with or without it, and
// a process that never runs a CPU GEMM never maps its 40 MB.
#include "ops/cpu_gemm_library.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "core/signal_stack.h"
#include "cuda/lazy_library.h"

extern "C" char* openblas_get_corename();

namespace ftune::cpu {
namespace {

// oneDNN's C API (dnnl.h; the same in its releases 1.x to 3.x), declared here so that no header
// is needed to build.
struct DnnlVersion {
  int major, minor, patch;
  const char* hash;
  unsigned cpu_runtime, gpu_runtime;
};
using DnnlSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
using DnnlVersionFn = const DnnlVersion* (*)();
using DnnlIsaFn = int (*)();
using OmpGetMaxThreads = int (*)();
using OmpSetNumThreads = void (*)(int);

struct OneDnn {
  DnnlSgemm sgemm = nullptr;
  DnnlVersionFn version = nullptr;
  DnnlIsaFn isa = nullptr;
  OmpGetMaxThreads omp_get_max_threads = nullptr;  // its OpenMP runtime's, found through it
  OmpSetNumThreads omp_set_num_threads = nullptr;
  std::string error;  // why it is unavailable; empty when loaded
};

cuda::LazyLibrary& onednn_library() {
  static cuda::LazyLibrary library("libdnnl.so.2", "FTUNE_ONEDNN_LIBRARY");
  return library;
}

const OneDnn& onednn() {
  static const OneDnn lib = [] {
    cuda::LazyLibrary& library = onednn_library();
    OneDnn d;
    if (const auto error = library.load_error()) {
      d.error = *error;
      return d;
    }
    d.sgemm = reinterpret_cast<DnnlSgemm>(library.symbol("dnnl_sgemm"));
    d.version = reinterpret_cast<DnnlVersionFn>(library.symbol("dnnl_version"));
    d.isa = reinterpret_cast<DnnlIsaFn>(library.symbol("dnnl_get_effective_cpu_isa"));
    d.omp_get_max_threads =
        reinterpret_cast<OmpGetMaxThreads>(library.symbol("omp_get_max_threads"));
    d.omp_set_num_threads =
        reinterpret_cast<OmpSetNumThreads>(library.symbol("omp_set_num_threads"));
    if (!d.sgemm || !d.version || !d.isa)
      d.error = library.name() + " has no dnnl_sgemm, dnnl_version or dnnl_get_effective_cpu_isa";
    else if (!d.omp_get_max_threads || !d.omp_set_num_threads)
      d.error = library.name() + " is not the OpenMP build (no omp_set_num_threads found)";
    return d;
  }();
  return lib;
}

// dnnl_cpu_isa_t's values (dnnl_types.h) for the ones x86 CPUs report.
std::string isa_name(int isa) {
  switch (isa) {
    case 0x1: return "SSE4.1";
    case 0x3: return "AVX";
    case 0x7: return "AVX2";
    case 0x407: return "AVX2-VNNI";
    case 0x27: return "AVX-512";
    case 0x67: return "AVX-512 VNNI";
    case 0xe7: return "AVX-512 BF16";
    case 0x3e7: return "AVX-512 AMX";
    default: return fmt::format("ISA {:#x}", isa);
  }
}

constexpr int kUnset = -1;
std::atomic<int> g_library{kUnset};

// A weight gradient accumulated into C (dW += dY^T @ X, beta != 0) is made apart in panels of
// rows of C, each added to C after: oneDNN folds C into its running sums, so C + A @ B would
// round differently from the sum of the two products made apart (the gradients of two
// micro-batches accumulated in one process against the same gradients summed over ranks), as
// OpenBLAS's C + (A @ B) does. Each panel is one dnnl_sgemm call, which packs all of B (X: tokens
// x N) again, so the panels are as tall as kPanelFloats allows (a linear layer's whole block of
// rows at the sizes of BERT-base and below): panels of 256 rows cost MiniLM's and BERT-base's
// weight gradients about 20 % more time at 4096 tokens (bench/results/cpu_training.md). The
// scratch is at most kPanelFloats a thread, and at least kPanelRows rows.
constexpr int64_t kPanelRows = 256;
constexpr int64_t kPanelFloats = int64_t{4} << 20;  // 16 MiB

// oneDNN threads its GEMM with OpenMP up to omp_get_max_threads() of the calling thread; ftune's
// pool has already split the work, so each call runs on one thread. The count is the calling
// thread's own (libgomp keeps it per thread outside a parallel region) and is put back after,
// so a caller's other OpenMP code keeps its setting. oneDNN's sgemm kernels point the stack
// pointer into the heap while they run: the calling thread gets an alternate signal stack first,
// on which ftune's handlers run (core/signal_stack.h).
void onednn_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc) {
  const OneDnn& d = onednn();
  if (K == 0) {  // dnnl_sgemm refuses a leading dimension of 0
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  const auto call = [&](int64_t m0, int64_t rows, float b, float* out, int64_t ldo) {
    const float* a = trans_a ? A + m0 : A + m0 * lda;
    return d.sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', rows, N, K, alpha, a, lda, B, ldb, b,
                   out, ldo);
  };
  use_alternate_signal_stack();
  const int before = d.omp_get_max_threads();
  if (before != 1) d.omp_set_num_threads(1);
  int status = 0;
  if (trans_a && beta != 0.0f) {
    thread_local std::vector<float> panel;
    const int64_t panel_rows = std::max(kPanelRows, kPanelFloats / std::max<int64_t>(N, 1));
    for (int64_t m0 = 0; m0 < M && status == 0; m0 += panel_rows) {
      const int64_t rows = std::min(panel_rows, M - m0);
      panel.resize(static_cast<size_t>(rows * N));
      status = call(m0, rows, 0.0f, panel.data(), N);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < N; ++j) {
          float& c = C[(m0 + i) * ldc + j];
          c = beta * c + panel[i * N + j];
        }
    }
  } else {
    status = call(0, M, beta, C, ldc);
  }
  if (before != 1) d.omp_set_num_threads(before);
  if (status != 0)
    throw InternalError(fmt::format("dnnl_sgemm({}, {}, {}, trans {}{}) failed with status {}", M,
                                    N, K, trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', status));
}

GemmLibrary resolve(const char* env) {
  const std::string text = env ? env : "";
  if (text.empty() || text == "auto")
    return onednn_available() ? GemmLibrary::OneDnn : GemmLibrary::OpenBlas;
  return parse_gemm_library(text, "FTUNE_CPU_GEMM");
}

}  // namespace

const char* gemm_library_name(GemmLibrary lib) {
  return lib == GemmLibrary::OneDnn ? "onednn" : "openblas";
}

bool onednn_available() {
  return onednn().error.empty();
}

std::string onednn_unavailable_reason() {
  return onednn().error;
}

void* onednn_symbol(const char* name) {
  return onednn_available() ? onednn_library().symbol(name) : nullptr;
}

GemmLibrary parse_gemm_library(const std::string& text, const std::string& what) {
  if (text.empty() || text == "auto")
    return onednn_available() ? GemmLibrary::OneDnn : GemmLibrary::OpenBlas;
  if (text == "openblas") return GemmLibrary::OpenBlas;
  if (text == "onednn") {
    if (!onednn_available())
      throw InputError(what + " is 'onednn', but oneDNN cannot be used: " +
                       onednn_unavailable_reason() +
                       " (install libdnnl2, or use openblas or auto)");
    return GemmLibrary::OneDnn;
  }
  throw InputError(what + " is '" + text + "': expected openblas, onednn or auto");
}

GemmLibrary gemm_library() {
  int lib = g_library.load(std::memory_order_relaxed);
  if (lib == kUnset) {
    int resolved = static_cast<int>(resolve(std::getenv("FTUNE_CPU_GEMM")));
    int expected = kUnset;
    g_library.compare_exchange_strong(expected, resolved);
    lib = g_library.load();
  }
  return static_cast<GemmLibrary>(lib);
}

void set_gemm_library(GemmLibrary lib) {
  if (lib == GemmLibrary::OneDnn && !onednn_available())
    throw InputError("the CPU GEMM library 'onednn' cannot be used: " +
                     onednn_unavailable_reason());
  g_library.store(static_cast<int>(lib));
}

std::string gemm_library_description() {
  const GemmLibrary lib = gemm_library();
  const std::string openblas = fmt::format("OpenBLAS core {}", openblas_get_corename());
  std::string onednn_text = "oneDNN unavailable: " + onednn_unavailable_reason();
  if (onednn_available()) {
    const DnnlVersion* v = onednn().version();
    onednn_text = fmt::format("oneDNN {}.{}.{} {}", v->major, v->minor, v->patch,
                              isa_name(onednn().isa()));
  }
  return fmt::format("{} ({}; other: {}; FTUNE_CPU_GEMM=openblas|onednn)", gemm_library_name(lib),
                     lib == GemmLibrary::OneDnn ? onednn_text : openblas,
                     lib == GemmLibrary::OneDnn ? openblas : onednn_text);
}

void serial_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                 int64_t ldc) {
  if (gemm_library() == GemmLibrary::OneDnn) {
    onednn_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
              static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta,
              C, static_cast<int>(ldc));
}

}  // namespace ftune::cpu
