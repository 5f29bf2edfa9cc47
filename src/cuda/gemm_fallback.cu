// The GEMM's own kernels (cuda/gemm.h): the naive one-thread-per-output product for problems
// cuBLASLt has no algorithm for (or K == 0), and the epilogues run separately when cuBLASLt cannot
// fuse them: the bias added to C, and the bias gradient as a column reduction
// (cuda/column_reduce.cuh).
#include "cuda/column_reduce.cuh"
#include "cuda/gemm_fallback.h"

namespace ftune::cuda {
namespace {

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
    const float a = load_f32(trans_a ? A + k * lda + i : A + i * lda + k);
    const float b = load_f32(trans_b ? B + j * ldb + k : B + k * ldb + j);
    sum += a * b;
  }
  float v = alpha * sum;
  if (beta != 0.0f) v += beta * load_f32(C + i * ldc + j);
  store_f32(C + i * ldc + j, v);
}

// C[i, j] += bias[j] on an (M, N) C that holds the product, in fp32, one rounding.
template <typename TC, typename TB>
__global__ void add_bias_kernel(TC* C, int64_t ldc, const TB* bias, int64_t M, int64_t N) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < M * N;
       idx += stride) {
    const int64_t i = idx / N, j = idx % N;
    store_f32(C + i * ldc + j, load_f32(C + i * ldc + j) + load_f32(bias + j));
  }
}

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

}  // namespace

void gemm_naive(const GemmArgs& g) {
  if (g.M == 0 || g.N == 0) return;
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

void gemm_unfused_epilogue(const GemmArgs& g) {
  switch (g.epilogue) {
    case GemmEpilogue::None: return;
    case GemmEpilogue::Bias:
      if (g.M == 0 || g.N == 0) return;
      with_type(g.c_type, [&](auto c_tag) {
        with_type(g.bias_type, [&](auto b_tag) {
          using TC = decltype(c_tag);
          using TB = decltype(b_tag);
          add_bias_kernel<TC, TB><<<grid_stride_blocks(g.M * g.N, 256), 256, 0,
                                    compute_stream()>>>(static_cast<TC*>(g.C), g.ldc,
                                                        static_cast<const TB*>(g.bias), g.M, g.N);
          FTUNE_CUDA_CHECK_LAUNCH();
        });
      });
      return;
    case GemmEpilogue::BgradOpA:
      // op(A)[i, k] = A[k * lda + i] (A stored (K, M), checked): the column sums of A's K rows.
      column_sums(g.bias_grad, /*accumulate=*/false, g.A, g.a_type, g.lda, g.K, g.M);
      return;
  }
}

}  // namespace ftune::cuda
