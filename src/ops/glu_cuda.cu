// Gated activation on CUDA; mirrors ops/glu_cpu.cc (ops/glu_math.h): one thread per (n, f), fp32
// math on values loaded from f32 or 16-bit storage (cuda/element.cuh), one rounding on the store.
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/element.cuh"
#include "cuda/streams.cuh"
#include "ops/glu.h"
#include "ops/glu_math.h"

namespace ftune::cuda {
namespace {

template <typename T>
__global__ void glu_forward_kernel(T* out, const T* gu, int64_t N, int64_t F, GluAct act) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < N * F;
       e += stride) {
    const int64_t n = e / F, f = e % F;
    const float g = load_f32(gu + n * 2 * F + f), u = load_f32(gu + n * 2 * F + F + f);
    store_f32(out + e, glu_act_value(g, act) * u);
  }
}

// T: gu and dgu; D: dout (f32 or T).
template <typename T, typename D>
__global__ void glu_backward_kernel(T* dgu, const T* gu, const D* dout, int64_t N, int64_t F,
                                    GluAct act) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < N * F;
       e += stride) {
    const int64_t n = e / F, f = e % F;
    const float g = load_f32(gu + n * 2 * F + f), u = load_f32(gu + n * 2 * F + F + f),
                dy = load_f32(dout + e);
    store_f32(dgu + n * 2 * F + f, dy * u * glu_act_grad(g, act));
    store_f32(dgu + n * 2 * F + F + f, dy * glu_act_value(g, act));
  }
}

template <typename T>
void forward(T* out, const T* gu, int64_t N, int64_t F, GluAct act) {
  if (N * F == 0) return;
  glu_forward_kernel<<<grid_stride_blocks(N * F, 256), 256, 0, compute_stream()>>>(out, gu, N, F,
                                                                                   act);
  FTUNE_CUDA_CHECK_LAUNCH();
}

template <typename T, typename D>
void backward(T* dgu, const T* gu, const D* dout, int64_t N, int64_t F, GluAct act) {
  if (N * F == 0) return;
  glu_backward_kernel<<<grid_stride_blocks(N * F, 256), 256, 0, compute_stream()>>>(dgu, gu, dout,
                                                                                    N, F, act);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void glu_forward(float* out, const float* gu, int64_t N, int64_t F, GluAct act) {
  forward(out, gu, N, F, act);
}

void glu_backward(float* dgu, const float* gu, const float* dout, int64_t N, int64_t F,
                  GluAct act) {
  backward(dgu, gu, dout, N, F, act);
}

void glu_forward_16(void* out, const void* gu, DType dtype, int64_t N, int64_t F, GluAct act) {
  with_float_type(dtype, out, [&](auto* o) {
    using T = std::remove_pointer_t<decltype(o)>;
    forward(o, static_cast<const T*>(gu), N, F, act);
  });
}

void glu_backward_16(void* dgu, const void* gu, const void* dout, DType dtype, DType dout_dtype,
                     int64_t N, int64_t F, GluAct act) {
  with_float_type(dtype, dgu, [&](auto* d) {
    using T = std::remove_pointer_t<decltype(d)>;
    if (dout_dtype == DType::F32)
      backward(d, static_cast<const T*>(gu), static_cast<const float*>(dout), N, F, act);
    else
      backward(d, static_cast<const T*>(gu), static_cast<const T*>(dout), N, F, act);
  });
}

}  // namespace ftune::cuda
