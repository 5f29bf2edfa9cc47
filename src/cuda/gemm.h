// Row-major f32 GEMM on the current CUDA device through cuBLASLt: the CUDA twin of
// ops/primitives_cpu.h's gemm(), with the same argument convention, plus an optional bias added to
// every row (cuBLASLt's BIAS epilogue where it applies). Plain C++ header: no CUDA includes.
//
// One cuBLASLt handle and one workspace of kGemmWorkspaceBytes per device, created on the first
// GEMM on that device (or by gemm_init) and kept for the life of the process: nothing is allocated
// per call. The workspace comes from device_malloc, so it shows in the device memory accounting.
// Algorithms are chosen by cuBLASLt's heuristic once per (shape, transposes, leading dimensions,
// pointer alignments, epilogue, math mode) and cached.
//
// Math: fp32 storage and fp32 compute by default (parity with the CPU at 1e-5). set_gemm_tf32(true)
// lets cuBLASLt use TF32 tensor cores for these GEMMs (the DESIGN's "TF32 for any fp32 GEMM"
// switch; ~1e-3 relative error, so it is off unless a caller asks).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ftune::cuda {

// 32 MiB: NVIDIA's recommended cuBLASLt workspace for Hopper (enough for every split-K /
// stream-K algorithm the heuristic offers for f32); smaller GPUs simply use less of it.
constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

// C (M, N) = alpha * op(A) @ op(B) + beta * C [+ bias (N) on every row], row-major;
// A is (M, K) or, transposed, stored (K, M); B is (K, N) or, transposed, stored (N, K).
// Leading dimensions are in elements. Runs on the default stream of the current device.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
          const float* bias = nullptr);

// Creates the handle and workspace of `device` now (a trainer can call it before its step loop;
// otherwise the first GEMM does).
void gemm_init(int device);

// TF32 tensor-core math for the f32 GEMMs above (process-wide; default off).
void set_gemm_tf32(bool enabled);
bool gemm_tf32();

}  // namespace ftune::cuda
