// The unfused disentangled-attention kernels cuda_kernels_bench compares the fused ones against
// (bench/disentangled_unfused_old.cu). Not used by ftune itself. a.rel_index: a device table.
#pragma once

#include "ops/disentangled_attention.h"

namespace ftune::bench_old {

// probs: (B, H, T, T) floats; dS: (B, H, T, T) floats of scratch.
void disentangled_forward_unfused(const DisentangledArgs& a, float* out, float* probs,
                                  const float* q, const float* k, const float* v, const float* pk,
                                  const float* pq);
void disentangled_backward_unfused(const DisentangledArgs& a, float* dq, float* dk, float* dv,
                                   float* dpk, float* dpq, const float* dout, const float* q,
                                   const float* k, const float* v, const float* pk,
                                   const float* pq, const float* probs, float* dS);

}  // namespace ftune::bench_old
