// The CUDA kernels that cuda_kernels_bench compares the current ones against, as they were before
// issue 25 (copied unchanged into bench/cuda_kernels_old.cu, so the benchmark prints before and
// after numbers on the same GPU in one run). Not used by ftune itself.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ftune::bench_old {

// dtable[ids[n]] += dout[n]: one block per token; the block of the first token of an id adds every
// token of that id serially.
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C,
                        int64_t padding_idx);
// out[c] += sum over rows of x[r * ld + c]: a 32 x 32 block per 32 columns, all rows in it.
void add_column_sums(float* out, const void* x, DType type, int64_t ld, int64_t rows,
                     int64_t cols);
// dweight += sum dout * xhat, dbias += sum dout: the same 32 x 32 shape.
void layer_norm_params(float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* mean, const float* rstd, int64_t N, int64_t C);

}  // namespace ftune::bench_old
