// The GEMM's own kernels, used where cuBLASLt is not (cuda/gemm_path.h): the naive product and
// the unfused epilogues. Plain C++ header; implemented in gemm_fallback.cu, on the compute stream.
#pragma once

#include "cuda/gemm.h"

namespace ftune::cuda {

// C = alpha op(A) op(B) + beta C by one thread per output element (g's epilogue ignored).
void gemm_naive(const GemmArgs& g);
// g's epilogue after the plain product is in C: C += bias, or bias_grad = the column sums of A
// (stored (K, M)), in the order of core/column_order.h.
void gemm_unfused_epilogue(const GemmArgs& g);

}  // namespace ftune::cuda
