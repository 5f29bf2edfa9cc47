// Row-major GEMMs on the current CUDA device through cuBLASLt: the CUDA twin of
// ops/primitives_cpu.h's gemm(), with the same argument convention, for fp32 (optionally TF32) and
// bf16 / fp16 inputs with fp32 accumulation, and the two cuBLASLt epilogues an op uses: the bias of
// a linear layer's forward GEMM, and its bias gradient, reduced from dout inside the weight
// gradient's GEMM (dW = dout^T x: BgradOpA). Plain C++ header: no CUDA includes;
// check_gemm_args() is plain C++ too and is built (and tested) without CUDA.
//
// Memory, and when it is allocated:
//   - one cuBLASLt handle and one workspace of kGemmWorkspaceBytes per device, on the first GEMM on
//     that device (or gemm_init), kept for the life of the process (device_malloc, so it shows in
//     the device memory accounting);
//   - while a GEMM shape is autotuned (its first call in the process, unless the cache file has it
//     or autotuning is off), the candidates' timing runs must not change what the caller sees.
//     With beta == 0 they write the caller's C and bias_grad, which are pure outputs that the
//     real call overwrites right after (no memory needed). With beta != 0 (D accumulates into C)
//     they write a scratch D the size of C instead: device_malloc'ed for that shape's timing and
//     freed as soon as it is timed. Shapes are timed per size bucket (gemm_algo_cache.h), so with
//     length-bucketed batches the timing (and this scratch) happens for the few dozen buckets a
//     run's token counts fall into, mostly in its first steps. If the scratch cannot be
//     allocated, the heuristic's first choice is used for that shape (nothing fails).
// Nothing else is allocated per call.
//
// Host cost per call (cuda/gemm_path.h): the call's key is a small struct (shape, types,
// epilogue, alignment classes, device), looked up in a per-thread table that holds the cuBLASLt
// descriptors and the chosen algorithm: no string, no lock and no descriptor creation after a
// shape's first call in a thread. Only a first call takes the process-wide lock of the choice.
//
// Algorithm choice (cudnn.benchmark for cuBLASLt): the first time the process sees a GEMM shape,
// the heuristic's top candidates are timed on the compute stream and the fastest is kept in memory
// and in a JSON cache file shared by every ftune process of the user (see gemm_algo_cache.h:
// $FTUNE_GEMM_CACHE, else $XDG_CACHE_HOME/ftune/ or ~/.cache/ftune/gemm_algorithms.json), written
// when gemm_autotune_save() is called (the trainer: after its first step and at the end of the
// run), not after every shape. An algorithm loaded from the file is re-validated with
// cublasLtMatmulAlgoCheck before use. FTUNE_GEMM_AUTOTUNE=0 disables timing and the file: the
// heuristic's first choice is used, as cuBLASLt alone would. A GEMM first seen inside a CUDA graph
// capture uses the heuristic's first choice (timing cannot run while capturing).
//
// Paths and fallbacks (cuda/gemm_path.h; each counted in summary.json "gpu_paths"):
//   fused     cuBLASLt runs the call with its epilogue;
//   unfused   the epilogue cannot be fused for this call (bias or bias_grad not 16-byte aligned
//             or not of the output's type, or cuBLASLt answers NOT_SUPPORTED / offers no
//             algorithm): cuBLASLt's plain GEMM,
//             then the epilogue as a separate kernel (the bias added, or the bias gradient as the
//             column reduction of cuda/column_reduce.cuh);
//   naive     cuBLASLt has no algorithm for the plain GEMM either: a one-thread-per-output kernel;
// every fallback logs one warning per shape with cuBLASLt's answer. An answer that the arguments
// are wrong (CUBLAS_STATUS_INVALID_VALUE) or any other failure throws DeviceError naming the
// call: an argument error never hides as a slow path.
//
// Math: compute is always fp32 (CUBLAS_COMPUTE_32F, fp32 alpha/beta). fp32 GEMMs use fp32 math
// by default (parity with the CPU at 1e-5); set_gemm_tf32(true) lets them use TF32 tensor cores
// (the DESIGN's "TF32 for any fp32 GEMM" switch; ~1e-3 relative error). The bias is fp32, or of
// C's 16-bit type when C is 16-bit (as autocast casts a bias: what cuBLASLt's epilogue takes for a
// 16-bit D; an fp32 bias with a 16-bit C runs unfused); the bias gradient is fp32 (fused with the
// fp32 C of a weight gradient).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace ftune::cuda {

// 32 MiB: NVIDIA's recommended cuBLASLt workspace for Hopper (enough for every split-K /
// stream-K algorithm the heuristic offers); smaller GPUs simply use less of it.
constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

// What is applied to P = alpha op(A) op(B) + beta C (computed in fp32) before D is stored in C.
// An epilogue that writes bias_grad overwrites it (=), it never accumulates.
enum class GemmEpilogue {
  None,      // D = P
  Bias,      // D = P + bias (N) on every row
  BgradOpA,  // D = P, and bias_grad (M) = sum over k of op(A)[i, k]; A must be stored transposed
             // (K, M): with A = dout (T, OC) and dW = dout^T @ x, that is the layer's bias gradient
};

struct GemmArgs {
  bool trans_a = false, trans_b = false;  // row-major, same convention as the fp32 gemm() below
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f, beta = 0.0f;
  const void* A = nullptr;  // (M, K), or stored (K, M) when trans_a
  DType a_type = DType::F32;
  int64_t lda = 0;
  const void* B = nullptr;  // (K, N), or stored (N, K) when trans_b
  DType b_type = DType::F32;
  int64_t ldb = 0;
  void* C = nullptr;  // (M, N): read when beta != 0, written with the result
  DType c_type = DType::F32;
  int64_t ldc = 0;
  GemmEpilogue epilogue = GemmEpilogue::None;
  const void* bias = nullptr;    // (N), for Bias: f32, or c_type when C is 16-bit
  DType bias_type = DType::F32;
  float* bias_grad = nullptr;    // fp32 (M) for BgradOpA
};

// Supported types: A and B both F32 with C F32 (TF32 when set_gemm_tf32(true)); or A and B both
// BF16 (or both F16) with C either F32 (fp32 accumulation into an fp32 C, e.g. parameter
// gradients with beta = 1) or the same 16-bit type. Runs on compute_stream() of the current
// device. Throws DeviceError naming the shape and types for an unsupported type combination and
// ShapeError for inconsistent arguments (see check_gemm_args).
void gemm(const GemmArgs& args);

// The host-side checks gemm() makes before touching the device: supported type combination,
// non-negative sizes, leading dimensions at least the stored row length, pointers present where
// the sizes and the epilogue need them (bias, bias_grad), absent where the epilogue ignores them,
// and aligned to their element size; the bias type; BgradOpA only with trans_a. Plain C++ (no
// CUDA needed).
void check_gemm_args(const GemmArgs& args);

// "gemm (M=4096, N=768, K=3072, A bf16 N, B bf16 T, C f32, epilogue bias)": for messages.
std::string describe_gemm(const GemmArgs& args);
std::string_view gemm_epilogue_name(GemmEpilogue epilogue);  // "none", "bias", "bgrad_op_a"

// fp32 C (M, N) = alpha * op(A) @ op(B) + beta * C [+ bias (N) on every row], row-major;
// A is (M, K) or, transposed, stored (K, M); B is (K, N) or, transposed, stored (N, K).
// Leading dimensions are in elements. Forwards to gemm(GemmArgs).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
          const float* bias = nullptr);

// Creates the handle and workspace of `device` now (a trainer can call it before its step loop;
// otherwise the first GEMM does).
void gemm_init(int device);

// TF32 tensor-core math for the f32 GEMMs above (process-wide; default off).
void set_gemm_tf32(bool enabled);
bool gemm_tf32();

// Timing of new shapes on or off (process-wide; the default is FTUNE_GEMM_AUTOTUNE, on unless it is
// "0"). Changing it forgets the choices made so far in this process (not the cache file), so a
// benchmark can compare the heuristic's first choice with the timed one.
void set_gemm_autotune(bool enabled);
bool gemm_autotune();

// "gemm autotune: 14 shapes timed, 3 from cache, 0 heuristic only" for this process so far, for a
// trainer to log once after its first step. (One info line is logged before the first timing, and
// each shape at debug level as it is chosen.)
std::string gemm_autotune_summary();

// Writes the shapes timed since the last save to the cache file (merged with what other processes
// wrote; gemm_algo_cache.h). Nothing to do when none were timed; never throws (a failure is
// logged once and the choices stay in memory).
void gemm_autotune_save();

}  // namespace ftune::cuda
