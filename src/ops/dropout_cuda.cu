// Dropout on CUDA: one thread per four consecutive elements, the same Philox stream and the same
// stream index map (ops/dropout.h) as the CPU. When a sequence's run and stride are multiples of
// four (the usual case) a thread's four elements are one Philox block and it evaluates Philox
// once; otherwise it evaluates it again where the stream group changes. A dropped element is
// multiplied by 0, as on the CPU and in PyTorch (x * mask * scale): NaN or inf stays non-finite
// (NaN), a negative value gives -0.
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/element.cuh"
#include "cuda/streams.cuh"
#include "ops/dropout.h"

namespace ftune::cuda {
namespace {

// Any pair of storage types (float/float included): the multiplier in fp32, one rounding on the
// store.
template <typename To, typename From>
__global__ void dropout_mixed_kernel(To* out, const From* inp, int64_t n, float p, float scale,
                                     RngKey rng, DropoutRuns runs) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g * 4 >= n) return;
  resolve_micro(rng, runs);  // a captured graph's micro-batch place, read at replay
  Philox4 r{};
  uint64_t group = ~0ull;
  for (int k = 0; k < 4; ++k) {
    const int64_t i = g * 4 + k;
    if (i >= n) break;
    const uint64_t s = dropout_stream_index(runs, i);
    if ((s >> 2) != group) {
      group = s >> 2;
      r = philox_block(rng, group);
    }
    store_f32(out + i, load_f32(inp + i) * (philox_uniform(philox_word(r, s)) >= p ? scale : 0.0f));
  }
}

}  // namespace

void dropout_apply_mixed(void* out, DType out_type, const void* inp, DType inp_type, int64_t n,
                         float p, RngKey rng, DropoutRuns runs) {
  if (n == 0) return;
  const int64_t groups = (n + 3) / 4;
  // p = 0 keeps every element (multiplier 1): the kernel is then a cast.
  const float scale = 1.0f / (1.0f - p);
  with_float_type(out_type, out, [&](auto* o) {
    with_float_type(inp_type, const_cast<void*>(inp), [&](auto* in) {
      dropout_mixed_kernel<<<grid_for(groups, 256), 256, 0, compute_stream()>>>(o, in, n, p, scale,
                                                                                rng, runs);
    });
  });
  FTUNE_CUDA_CHECK_LAUNCH();
}

void dropout_apply(float* out, const float* inp, int64_t n, float p, RngKey rng, DropoutRuns runs) {
  if (n == 0) return;
  if (p == 0.0f) {
    if (out != inp)
      FTUNE_CUDA_CHECK(cudaMemcpyAsync(out, inp, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                       compute_stream()));
    return;
  }
  const int64_t groups = (n + 3) / 4;
  dropout_mixed_kernel<<<grid_for(groups, 256), 256, 0, compute_stream()>>>(
      out, inp, n, p, 1.0f / (1.0f - p), rng, runs);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
