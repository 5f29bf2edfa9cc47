// Linear layer on CUDA; mirrors ops/linear_cpu.cc. The three products are row-major GEMMs through
// cuBLASLt (cuda/gemm.h): the bias fused into the forward GEMM's epilogue, the bias gradient into
// the weight gradient's (dW = dout^T x reduces dout's rows as it reads them: cuBLASLt's BGRADB),
// each falling back to its own kernel where cuBLASLt cannot fuse it (counted in gpu_paths).
// Gradient rule: dweight and dbias accumulate (+=, beta = 1); dinp is overwritten (beta = 0)
// unless accumulate_dinp (beta = 1). cuBLASLt's bias gradient is written, not added: it goes to
// the per-device column_results() scratch and is then added to dbias. Without a weight gradient
// (a frozen weight with a trainable bias) dbias is the column reduction of
// cuda/column_reduce.cuh. Mixed precision: 16-bit operands through cuda::gemm(GemmArgs) with fp32
// compute, dweight accumulated in fp32 (C f32, beta = 1), dbias from the 16-bit dout summed in
// fp32.
#include "cuda/column_reduce.cuh"
#include "cuda/gemm.h"
#include "ops/linear.h"

namespace ftune::cuda {
namespace {

// dweight (OC, C) += dout^T (OC, N) @ inp (N, C) (fp32 C) and dbias (OC) += column sums of dout,
// through one GEMM where the bias gradient fits the result scratch.
void weight_and_bias_gradients(float* dweight, float* dbias, const void* dout, int64_t lddo,
                               const void* inp, int64_t ldi, DType dtype, int64_t N, int64_t C,
                               int64_t OC) {
  const bool fused = dweight && dbias && OC <= kColumnResultFloats;
  if (dweight) {
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
    if (fused) {
      g.epilogue = GemmEpilogue::BgradOpA;
      g.bias_grad = column_results();
    }
    gemm(g);
  }
  if (fused)
    add_column_results(dbias, OC);
  else if (dbias && OC > 0)
    column_sums(dbias, /*accumulate=*/true, dout, dtype, lddo, N, OC);
}

}  // namespace

void linear_forward_mixed(void* out, DType out_type, int64_t ldo, const void* inp, int64_t ldi,
                          const void* weight, DType dtype, const void* bias, DType bias_type,
                          int64_t N, int64_t C, int64_t OC) {
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
  g.bias_type = bias_type;
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
  weight_and_bias_gradients(dweight, dbias, dout, lddo, inp, ldi, dtype, N, C, OC);
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
  weight_and_bias_gradients(dweight, dbias, dout, lddo, inp, ldi, DType::F32, N, C, OC);
}

}  // namespace ftune::cuda
