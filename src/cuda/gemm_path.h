// Which path a GEMM takes (cuda/gemm.h): cuBLASLt with the epilogue fused, cuBLASLt's plain GEMM
// with the epilogue as a separate kernel, or the naive kernel, and what each answer of cuBLASLt
// means. The policy is plain C++ over a GemmBackend, so that every rule is tested on any machine
// with a scripted backend (tests/cuda/gemm_path_test.cc); gemm.cu's backend is cuBLASLt.
//
//   1. An epilogue is tried fused when the call has a product (M, N, K > 0) and cuBLASLt can
//      take its vectors (bias / bias_grad 16-byte aligned and of the output's type, as cuBLASLt
//      documents them). Success: done (GpuPath::GemmFused).
//   2. Otherwise the plain product through cuBLASLt, then the epilogue's own kernel
//      (GpuPath::GemmUnfused; GpuPath::GemmPlain for a call without an epilogue).
//   3. When cuBLASLt offers no algorithm for the plain product either: the naive kernel
//      (GpuPath::GemmNaive). K == 0 (nothing to multiply: C = beta C) runs it too, uncounted.
// cuBLASLt's answers: NotSupported (no algorithm for this problem, from the heuristic or the
// call) moves to the next step with one warning per call key, naming the call and cuBLASLt's
// status; InvalidValue (the arguments are wrong) and Failed (anything else) throw DeviceError
// naming the call: a real error never becomes a slow path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/gemm.h"

namespace ftune::cuda {

// Everything a call's cuBLASLt plan depends on, as a small struct: the key of the per-thread plan
// table (descriptors + algorithm) and of the fallback warnings. No strings, no allocation.
struct GemmCallKey {
  int64_t M = 0, N = 0, K = 0, lda = 0, ldb = 0, ldc = 0;
  int32_t device = 0;
  uint8_t trans_a = 0, trans_b = 0, tf32 = 0, epilogue = 0;
  uint8_t a_type = 0, b_type = 0, c_type = 0, bias_type = 0;
  uint8_t align_a = 0, align_b = 0, align_c = 0, align_bias = 0;
  bool operator==(const GemmCallKey&) const = default;
};

struct GemmCallKeyHash {
  size_t operator()(const GemmCallKey& k) const;
};

// The key of `g` run with TF32 math or not on `device` (alignment classes as gemm_algo_cache.h).
GemmCallKey gemm_call_key(const GemmArgs& g, bool tf32, int device);

enum class LtStatus { Success, NotSupported, InvalidValue, Failed };

struct LtResult {
  LtStatus status = LtStatus::Success;
  std::string detail;  // cuBLASLt's status name and the step that answered (only on failure)
};

class GemmBackend {
 public:
  virtual ~GemmBackend() = default;
  // g (its epilogue included) through cuBLASLt, M, N, K > 0; choosing (and remembering) the
  // algorithm is the backend's business.
  virtual LtResult lt_matmul(const GemmArgs& g, const GemmCallKey& key) = 0;
  // The plain product (no epilogue) by the naive kernel, any K.
  virtual void naive(const GemmArgs& plain) = 0;
  // g's epilogue as its own kernel, after the plain product is in C.
  virtual void unfused_epilogue(const GemmArgs& g) = 0;
};

// Runs one GEMM by the policy above (after check_gemm_args).
void run_gemm(const GemmArgs& g, bool tf32, int device, GemmBackend& backend);

// Why cuBLASLt cannot take g's epilogue vectors ("bias not 16-byte aligned"), or null.
const char* gemm_epilogue_unfusable(const GemmArgs& g);

}  // namespace ftune::cuda
