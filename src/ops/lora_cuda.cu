// LoRA / DoRA on CUDA; mirrors ops/lora_cpu.cc step by step (see lora.h for the math). The
// low-rank products are row-major GEMMs through cuBLASLt (cuda/gemm.h) with the same arguments as
// the CPU's gemm() calls; dropout reuses the dropout op's kernel (the same Philox mask as the CPU);
// the DoRA scalings are elementwise kernels, and the magnitude gradient a fixed-order column
// reduction (no atomics). Parameter gradients accumulate (+=), activation gradients overwrite
// unless accumulate_dinp.
#include <cmath>

#include "cuda/column_reduce.cuh"
#include "cuda/gemm.h"
#include "cuda/reduce.cuh"
#include "ops/dropout.h"
#include "ops/lora.h"

namespace ftune::cuda {
namespace {

// dst[row, c] (=|+=) src[row, c] for an (N, C) contiguous src into a row-strided dst.
__global__ void copy_rows_kernel(float* dst, int64_t ldd, const float* src, int64_t N, int64_t C,
                                 bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N * C;
       i += stride) {
    const int64_t row = i / C, c = i % C;
    if (accumulate)
      dst[row * ldd + c] += src[i];
    else
      dst[row * ldd + c] = src[i];
  }
}

// wsq[o] = sum_c w[o, c]^2 in double: one warp per row.
__global__ void row_sq_norms_kernel(float* wsq, const float* w, int64_t OC, int64_t C) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (o >= OC) return;
  const int lane = threadIdx.x % 32;
  double acc = 0.0;
  for (int64_t c = lane; c < C; c += 32) acc += double(w[o * C + c]) * w[o * C + c];
  acc = warp_sum(acc);
  if (lane == 0) wsq[o] = static_cast<float>(acc);
}

// norm[o] = sqrt(max(0, wsq[o] + 2 s B_o . (W A^T)_o + s^2 B_o (A A^T) B_o^T)), one thread per o.
__global__ void dora_norm_rows_kernel(float* norm, const float* wsq, const float* b,
                                      const float* wa, const float* aat, int64_t OC, int64_t r,
                                      float scale) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= OC) return;
  const float* bo = b + o * r;
  double cross = 0.0, low = 0.0;
  for (int64_t k = 0; k < r; ++k) {
    cross += double(bo[k]) * wa[o * r + k];
    double t = 0.0;
    for (int64_t j = 0; j < r; ++j) t += double(aat[k * r + j]) * bo[j];
    low += double(bo[k]) * t;
  }
  const double sq = double(wsq[o]) + 2.0 * scale * cross + double(scale) * scale * low;
  norm[o] = static_cast<float>(sqrt(fmax(sq, 0.0)));
}

__global__ void dora_strip_bias_kernel(float* z, int64_t ldz, const float* out, int64_t ldo,
                                       const float* bias, int64_t N, int64_t OC) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N * OC;
       i += stride) {
    const int64_t r = i / OC, o = i % OC;
    z[r * ldz + o] = bias ? out[r * ldo + o] - bias[o] : out[r * ldo + o];
  }
}

// y = bias + (m/n) z (DoRA), or y += (m/n - 1) z (DoRA with adapter dropout).
template <bool kDropout>
__global__ void dora_output_forward_kernel(float* out, int64_t ldo, const float* z, int64_t ldz,
                                           const float* bias, const float* m, const float* norm,
                                           int64_t N, int64_t OC) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N * OC;
       i += stride) {
    const int64_t r = i / OC, o = i % OC;
    if constexpr (kDropout)
      out[r * ldo + o] += (m[o] / norm[o] - 1.0f) * z[r * ldz + o];
    else
      out[r * ldo + o] = (bias ? bias[o] : 0.0f) + m[o] / norm[o] * z[r * ldz + o];
  }
}

// dm[o] += sum_r dout[r, o] z[r, o] / norm[o] (a column reduction, cuda/column_reduce.cuh, in the
// CPU's order); then, as each element is read (exactly once), dout[r, o] *= m[o] / norm[o] in
// place (DoRA), or z[r, o] = (m[o] / norm[o] - 1) dout[r, o] (DoRA with adapter dropout).
template <bool kDropout>
struct DoraMagnitudeValues {
  float* dout;
  int64_t lddo;
  float* z;
  int64_t ldz;
  const float *m, *norm;
  __device__ void operator()(int64_t r, int64_t o, float* v) const {
    float* d = dout + r * lddo + o;
    float* zr = z + r * ldz + o;
    v[0] = *d * *zr;
    if constexpr (kDropout)
      *zr = (m[o] / norm[o] - 1.0f) * *d;
    else
      *d *= m[o] / norm[o];
  }
};
struct DoraMagnitudeAdd {
  float* dm;
  const float* norm;
  __device__ void operator()(int64_t o, const float* t) const {
    if (dm) dm[o] += t[0] / norm[o];
  }
};

template <bool kDropout>
void dora_output_forward_launch(float* out, int64_t ldo, const float* z, int64_t ldz,
                                const float* bias, const float* m, const float* norm, int64_t N,
                                int64_t OC) {
  if (N * OC == 0) return;
  dora_output_forward_kernel<kDropout><<<grid_stride_blocks(N * OC, 256), 256, 0,
                                         compute_stream()>>>(out, ldo, z, ldz, bias, m, norm, N,
                                                             OC);
  FTUNE_CUDA_CHECK_LAUNCH();
}

// In each mode only one of dout and z is written (the other is read only).
template <bool kDropout>
void dora_output_backward_launch(float* dm, float* dout, int64_t lddo, float* z, int64_t ldz,
                                 const float* m, const float* norm, int64_t N, int64_t OC) {
  if (OC == 0) return;
  column_reduce<1>(N, OC, DoraMagnitudeValues<kDropout>{dout, lddo, z, ldz, m, norm},
                   DoraMagnitudeAdd{dm, norm});
}

}  // namespace

void lora_forward(float* out, int64_t ldo, float* u, const float* inp, int64_t ldi, const float* a,
                  const float* b, int64_t N, int64_t C, int64_t OC, int64_t r, float scale, float p,
                  RngKey rng, DropoutRuns runs, float* scratch) {
  if (p > 0.0f) {
    dropout_apply(scratch, inp, N * C, p, rng, runs);  // inp is contiguous here (checked)
    inp = scratch;
    ldi = C;
  }
  // u (N, r) = x_d (N, C) @ A^T (C, r)
  gemm(false, true, N, r, C, 1.0f, inp, ldi, a, C, 0.0f, u, r);
  // out (N, OC) += s * u (N, r) @ B^T (r, OC)
  gemm(false, true, N, OC, r, scale, u, r, b, r, 1.0f, out, ldo);
}

void lora_backward(float* dinp, int64_t lddi, float* da, float* db, float* h, const float* dout,
                   int64_t lddo, const float* inp, int64_t ldi, const float* u, const float* a,
                   const float* b, int64_t N, int64_t C, int64_t OC, int64_t r, float scale,
                   bool accumulate_dinp, float p, RngKey rng, DropoutRuns runs, float* scratch) {
  // dB (OC, r) += s * dout^T (OC, N) @ u (N, r)
  if (db) gemm(true, false, OC, r, N, scale, dout, lddo, u, r, 1.0f, db, r);
  // h (N, r) = s * dout (N, OC) @ B (OC, r)
  gemm(false, false, N, r, OC, scale, dout, lddo, b, r, 0.0f, h, r);
  if (p > 0.0f) {
    dropout_apply(scratch, inp, N * C, p, rng, runs);
    inp = scratch;
    ldi = C;
  }
  // dA (r, C) += h^T (r, N) @ x_d (N, C)
  if (da) gemm(true, false, r, C, N, 1.0f, h, r, inp, ldi, 1.0f, da, C);
  if (!dinp) return;
  if (p == 0.0f) {
    // dinp (N, C) (+)= h (N, r) @ A (r, C)
    gemm(false, false, N, C, r, 1.0f, h, r, a, C, accumulate_dinp ? 1.0f : 0.0f, dinp, lddi);
    return;
  }
  // Through the dropout: scratch = dropout'(h A) (the same multipliers as forward), then add.
  gemm(false, false, N, C, r, 1.0f, h, r, a, C, 0.0f, scratch, C);
  dropout_apply(scratch, scratch, N * C, p, rng, runs);
  if (N * C == 0) return;
  copy_rows_kernel<<<grid_stride_blocks(N * C, 256), 256, 0, compute_stream()>>>(dinp, lddi, scratch, N, C,
                                                            accumulate_dinp);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void row_sq_norms(float* wsq, const float* w, int64_t OC, int64_t C) {
  if (OC == 0) return;
  row_sq_norms_kernel<<<grid_for(OC, 8), 256, 0, compute_stream()>>>(wsq, w, OC, C);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void dora_norms(float* norm, const float* wsq, const float* w, const float* a, const float* b,
                int64_t OC, int64_t C, int64_t r, float scale, float* workspace) {
  float* wa = workspace;            // (OC, r) = W A^T
  float* aat = workspace + OC * r;  // (r, r)  = A A^T
  gemm(false, true, OC, r, C, 1.0f, w, C, a, C, 0.0f, wa, r);
  gemm(false, true, r, r, C, 1.0f, a, C, a, C, 0.0f, aat, r);
  if (OC == 0) return;
  dora_norm_rows_kernel<<<grid_for(OC, 256), 256, 0, compute_stream()>>>(norm, wsq, b, wa, aat, OC, r, scale);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void dora_strip_bias(float* z, int64_t ldz, const float* out, int64_t ldo, const float* bias,
                     int64_t N, int64_t OC) {
  if (N * OC == 0) return;
  dora_strip_bias_kernel<<<grid_stride_blocks(N * OC, 256), 256, 0, compute_stream()>>>(z, ldz, out, ldo, bias, N, OC);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void dora_output_forward(float* out, int64_t ldo, const float* z, int64_t ldz, const float* bias,
                         const float* m, const float* norm, int64_t N, int64_t OC) {
  dora_output_forward_launch<false>(out, ldo, z, ldz, bias, m, norm, N, OC);
}

void dora_output_backward(float* dm, float* dout, int64_t lddo, const float* z, int64_t ldz,
                          const float* m, const float* norm, int64_t N, int64_t OC) {
  dora_output_backward_launch<false>(dm, dout, lddo, const_cast<float*>(z), ldz, m, norm, N, OC);
}

void dora_dropout_output_forward(float* out, int64_t ldo, const float* z, int64_t ldz,
                                 const float* m, const float* norm, int64_t N, int64_t OC) {
  dora_output_forward_launch<true>(out, ldo, z, ldz, nullptr, m, norm, N, OC);
}

void dora_dropout_output_backward(float* dm, float* z, int64_t ldz, const float* dout,
                                  int64_t lddo, const float* m, const float* norm, int64_t N,
                                  int64_t OC) {
  dora_output_backward_launch<true>(dm, const_cast<float*>(dout), lddo, z, ldz, m, norm, N, OC);
}

}  // namespace ftune::cuda
