// Which library runs ftune's CPU GEMMs: OpenBLAS or oneDNN, chosen at run time.
//
// Both run single-threaded on the calling thread: ops/primitives_cpu.cc cuts a large product into
// one block per compute thread (one pool for every CPU kernel, no second pool spinning beside it).
// oneDNN JIT-compiles its kernels for the instruction set the CPU reports (AVX2, AVX-512, AMX),
// where OpenBLAS picks a kernel table by CPU model and falls back to SSE3 kernels on models it
// does not know (Debian 12's 0.3.21 on Intel Emerald Rapids: 5-10x slower GEMMs).
//
// oneDNN is loaded at run time (libdnnl.so.2 from Debian's libdnnl2, or $FTUNE_ONEDNN_LIBRARY):
// the build does not depend on it. The choice: FTUNE_CPU_GEMM=openblas|onednn (unset or "auto":
// oneDNN where it loads, else OpenBLAS), or set_gemm_library() (`ftune bench --cpu-gemm`).
// `ftune doctor` shows it.
#pragma once

#include <cstdint>
#include <string>

namespace ftune::cpu {

enum class GemmLibrary { OpenBlas, OneDnn };

// "openblas" / "onednn".
const char* gemm_library_name(GemmLibrary lib);
// Parses "openblas", "onednn" or "auto" (the default); anything else, or "onednn" where oneDNN
// does not load, is an InputError naming `what` (the variable or option) and the accepted values.
GemmLibrary parse_gemm_library(const std::string& text, const std::string& what);

// Whether oneDNN loads (tried once, on the first call); else the reason.
bool onednn_available();
std::string onednn_unavailable_reason();

// A symbol of the loaded oneDNN library (or of its OpenMP runtime, found through it); nullptr when
// oneDNN is unavailable or has no such symbol (ops/cpu_matmul.cc takes its matmul API this way).
void* onednn_symbol(const char* name);

// The library in use: the last set_gemm_library(), else FTUNE_CPU_GEMM read once.
GemmLibrary gemm_library();
void set_gemm_library(GemmLibrary lib);

// One line for `ftune doctor`: the library in use, its version and the kernels it runs on this
// CPU (OpenBLAS's core, oneDNN's instruction set), and the other library's.
std::string gemm_library_description();

// C (M, N) = alpha * op(A) @ op(B) + beta * C, row-major, on the calling thread only, through
// gemm_library() (the arguments as in primitives_cpu.h's gemm()).
void serial_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                 int64_t ldc);

}  // namespace ftune::cpu
