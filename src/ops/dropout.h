// Inverted dropout with masks from Philox: element i of a tensor is kept when
// philox_uniform_at(rng, i) >= p, and kept values are scaled by 1 / (1 - p). The mask is never
// stored — backward regenerates it from the same key — and it is identical on every backend
// and for every thread count.
//   forward:  out = inp * keep / (1 - p)     (out may alias inp)
//   backward: dinp = dout * keep / (1 - p)   (overwritten; may alias dout)
#pragma once

#include "core/philox.h"
#include "core/tensor.h"

namespace ftune {

void dropout_forward(TensorView out, TensorView inp, float p, RngKey rng);
void dropout_backward(TensorView dinp, TensorView dout, float p, RngKey rng);

namespace cpu {
void dropout_apply(float* out, const float* inp, int64_t n, float p, RngKey rng);
// m[i] = keep(first + i) ? 1 / (1 - p) : 0 for i in [0, n): the multipliers of elements
// [first, first + n) of the stream (attention's probabilities use it row by row).
void dropout_multipliers(float* m, RngKey rng, uint64_t first, int64_t n, float p);
}  // namespace cpu

namespace cuda {
void dropout_apply(float* out, const float* inp, int64_t n, float p, RngKey rng);
}  // namespace cuda

}  // namespace ftune
