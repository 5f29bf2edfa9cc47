// Linear layer on CUDA; mirrors ops/linear_cpu.cc. The three products are row-major GEMMs through
// cuBLASLt (cuda/gemm.h), the bias fused into the forward GEMM's epilogue where cuBLASLt can;
// the bias gradient is a deterministic column sum (fixed reduction order, no atomics).
// Gradient rule: dweight and dbias accumulate (+=, beta = 1); dinp is overwritten (beta = 0)
// unless accumulate_dinp (beta = 1). Mixed precision: 16-bit operands through cuda::gemm(GemmArgs)
// with fp32 compute, dweight accumulated in fp32 (C f32, beta = 1), dbias from the 16-bit dout
// summed in fp32.
#include "cuda/cuda_check.h"
#include "cuda/element.cuh"
#include "cuda/streams.cuh"
#include "cuda/gemm.h"
#include "ops/linear.h"

namespace ftune::cuda {
namespace {

// out[c] += sum over rows of inp[r, c] for a (rows, cols) matrix with row stride ld. A block of
// 32 x 32 threads owns 32 columns: thread (x, y) sums rows y, y + 32, ..., then the 32 partial
// sums of a column are added in y order. The same launch shape every time: the same bits.
template <typename T>
__global__ void __launch_bounds__(1024)
    add_column_sums_kernel(float* out, const T* inp, int64_t ld, int64_t rows, int64_t cols) {
  __shared__ float partial[32][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc = 0.0f;
  if (c < cols)
    for (int64_t r = threadIdx.y; r < rows; r += 32) acc += load_f32(inp + r * ld + c);
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float s = 0.0f;
    for (int k = 0; k < 32; ++k) s += partial[k][threadIdx.x];
    out[c] += s;
  }
}

}  // namespace

void linear_forward_mixed(void* out, DType out_type, int64_t ldo, const void* inp, int64_t ldi,
                          const void* weight, DType dtype, const float* bias, int64_t N, int64_t C,
                          int64_t OC) {
  // out (N, OC) = inp (N, C) @ weight^T (C, OC) [+ bias]
  GemmArgs g;
  g.trans_a = false;
  g.trans_b = true;
  g.M = N;
  g.N = OC;
  g.K = C;
  g.A = inp;
  g.a_type = dtype;
  g.lda = ldi;
  g.B = weight;
  g.b_type = dtype;
  g.ldb = C;
  g.C = out;
  g.c_type = out_type;
  g.ldc = ldo;
  g.epilogue = bias ? GemmEpilogue::Bias : GemmEpilogue::None;
  g.bias = bias;
  gemm(g);
}

void linear_backward_mixed(void* dinp, DType dinp_type, int64_t lddi, float* dweight, float* dbias,
                           const void* dout, int64_t lddo, const void* inp, int64_t ldi,
                           const void* weight, DType dtype, int64_t N, int64_t C, int64_t OC,
                           bool accumulate_dinp) {
  if (dinp) {
    // dinp (N, C) = dout (N, OC) @ weight (OC, C)
    GemmArgs g;
    g.M = N;
    g.N = C;
    g.K = OC;
    g.A = dout;
    g.a_type = dtype;
    g.lda = lddo;
    g.B = weight;
    g.b_type = dtype;
    g.ldb = C;
    g.beta = accumulate_dinp ? 1.0f : 0.0f;
    g.C = dinp;
    g.c_type = dinp_type;
    g.ldc = lddi;
    gemm(g);
  }
  if (dweight) {
    // dweight (OC, C) += dout^T (OC, N) @ inp (N, C), accumulated in fp32
    GemmArgs g;
    g.trans_a = true;
    g.M = OC;
    g.N = C;
    g.K = N;
    g.A = dout;
    g.a_type = dtype;
    g.lda = lddo;
    g.B = inp;
    g.b_type = dtype;
    g.ldb = ldi;
    g.beta = 1.0f;
    g.C = dweight;
    g.c_type = DType::F32;
    g.ldc = C;
    gemm(g);
  }
  if (dbias && OC > 0) {
    with_float_type(dtype, const_cast<void*>(dout), [&](auto* dy) {
      add_column_sums_kernel<<<grid_for(OC, 32), dim3(32, 32), 0, compute_stream()>>>(dbias, dy,
                                                                                      lddo, N, OC);
    });
    FTUNE_CUDA_CHECK_LAUNCH();
  }
}

void linear_forward(float* out, int64_t ldo, const float* inp, int64_t ldi, const float* weight,
                    const float* bias, int64_t N, int64_t C, int64_t OC) {
  // out (N, OC) = inp (N, C) @ weight^T (C, OC) [+ bias]
  gemm(false, true, N, OC, C, 1.0f, inp, ldi, weight, C, 0.0f, out, ldo, bias);
}

void linear_backward(float* dinp, int64_t lddi, float* dweight, float* dbias, const float* dout,
                     int64_t lddo, const float* inp, int64_t ldi, const float* weight, int64_t N,
                     int64_t C, int64_t OC, bool accumulate_dinp) {
  // dinp (N, C) = dout (N, OC) @ weight (OC, C)
  if (dinp)
    gemm(false, false, N, C, OC, 1.0f, dout, lddo, weight, C, accumulate_dinp ? 1.0f : 0.0f, dinp,
         lddi);
  // dweight (OC, C) += dout^T (OC, N) @ inp (N, C)
  if (dweight) gemm(true, false, OC, C, N, 1.0f, dout, lddo, inp, ldi, 1.0f, dweight, C);
  // dbias (OC) += sum over rows of dout
  if (dbias && OC > 0) {
    add_column_sums_kernel<<<grid_for(OC, 32), dim3(32, 32), 0, compute_stream()>>>(dbias, dout, lddo, N, OC);
    FTUNE_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace ftune::cuda
