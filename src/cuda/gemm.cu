// Row-major GEMMs through cuBLASLt (see gemm.h): the per-thread plans (descriptors + algorithm)
// on a small struct key and the cuBLASLt backend of the path policy (gemm_path.h; the timed choice
// of algorithm with its cache file is in gemm_autotune.cu, the fallback kernels in
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
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/memory.h"
#include "core/op_profile.h"
#include "cuda/cuda_device.h"
#include "cuda/gemm_fallback.h"
#include "cuda/gemm_lt.cuh"

namespace ftune::cuda {
namespace lt {
namespace {

std::mutex g_blas_mu;
std::array<std::atomic<DeviceBlas*>, kMaxDevices> g_blas{};

}  // namespace

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

}  // namespace lt

namespace {

using namespace lt;

std::atomic<bool> g_tf32{false};

int current_device() {
  int device = 0;
  FTUNE_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

struct ThreadPlans {
  uint64_t generation = 0;
  std::unordered_map<GemmCallKey, std::unique_ptr<LtPlan>, GemmCallKeyHash> plans;
};
thread_local ThreadPlans t_plans;

bool stream_capturing() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FTUNE_CUDA_CHECK(cudaStreamIsCapturing(compute_stream(), &status));
  return status != cudaStreamCaptureStatusNone;
}

// cuBLASLt as the backend of the path policy (gemm_path.h).
class CublasLtBackend final : public GemmBackend {
 public:
  LtResult lt_matmul(const GemmArgs& g, const GemmCallKey& key) override {
    DeviceBlas& blas = device_blas(key.device);
    const uint64_t generation = plan_generation();
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
        std::lock_guard<std::mutex> lock(tune_mutex());
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
      std::lock_guard<std::mutex> lock(tune_mutex());
      remember_refusal(key, r.detail);
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
