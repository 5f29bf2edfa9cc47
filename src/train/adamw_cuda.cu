// AdamW's update on CUDA; mirrors train/adamw_cpu.cc element for element (the same expressions
// in the same order, see adamw.h for the equations). All parameter segments are updated by one
// launch: the segment table (offset, count, LR, decay, step size per parameter tensor) travels as
// a __grid_constant__ kernel parameter, and a grid-stride loop covers the flat range from the
// first segment's start to the last one's end; each thread finds the segment of its first element
// by binary search and then walks forward (its indices only increase). Elements between segments,
// if any, are left alone, as on the CPU. The step's scalars come from the device (step_scalars.h):
// a skipped step returns before touching anything; the clip coefficient and t are read once per
// thread, and the step size lr / (1 - beta1^t) once per segment a thread enters. The bf16 / f16
// shadow of the weights, when given, is written from the updated value in the same pass for the
// elements it covers, [shadow_begin, shadow_end).
#include <algorithm>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "train/adamw.h"
#include "train/step_scalars.h"

namespace ftune::cuda {
namespace {

struct SegmentTable {
  int count;
  AdamWSegment seg[kAdamWSegmentsPerLaunch];
};
// CUDA 12.1+ allows 32764 bytes of kernel parameters on Volta and newer.
static_assert(sizeof(SegmentTable) + 64 < 32764, "AdamW segment table too large for a launch");

// Index of the last segment whose offset is <= i (0 if none).
__device__ int find_segment(const SegmentTable& t, int64_t i) {
  int lo = 0, hi = t.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (t.seg[mid].offset <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, bf16_t* shadow_bf16,
                             f16_t* shadow_f16, int64_t shadow_begin, int64_t shadow_end,
                             const __grid_constant__ SegmentTable table,
                             int64_t begin, int64_t end, float beta1, float beta2, float eps,
                             const double* scalars) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= end) return;
  if (scalars[kStepOk] == 0.0) return;  // a skipped step: nothing is touched
  const float grad_scale = static_cast<float>(scalars[kClipCoef]);
  const AdamWBiasCorrection bc = adamw_bias_correction(beta1, beta2, scalars[kAdamSteps]);
  const float bias_correction2_sqrt = bc.bc2_sqrt;
  int s = find_segment(table, i);
  int sized = -1;  // the segment step_size belongs to
  float step_size = 0.0f;
  for (; i < end; i += stride) {
    while (s < table.count && i >= table.seg[s].offset + table.seg[s].count) ++s;
    if (s == table.count) return;
    const AdamWSegment& seg = table.seg[s];
    if (i < seg.offset) continue;  // between segments
    if (sized != s) {
      step_size = static_cast<float>(double(seg.lr) / bc.bc1);
      sized = s;
    }
    const float lr = seg.lr, weight_decay = seg.weight_decay;
    const float gi = g[i] * grad_scale;
    if (weight_decay != 0.0f) p[i] *= 1.0f - lr * weight_decay;
    m[i] += (gi - m[i]) * (1.0f - beta1);  // torch: exp_avg.lerp_(grad, 1 - beta1)
    v[i] = v[i] * beta2 + (1.0f - beta2) * gi * gi;
    const float denom = sqrtf(v[i]) / bias_correction2_sqrt + eps;
    p[i] -= step_size * m[i] / denom;
    if (i >= shadow_begin && i < shadow_end) {
      if (shadow_bf16) shadow_bf16[i - shadow_begin] = float_to_bf16(p[i]);
      if (shadow_f16) shadow_f16[i - shadow_begin] = float_to_f16(p[i]);
    }
  }
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, bf16_t* shadow_bf16,
                  f16_t* shadow_f16, int64_t shadow_begin, int64_t shadow_end,
                  const AdamWSegment* segments, int64_t count, float beta1, float beta2,
                  float eps, const double* scalars) {
  for (int64_t first = 0; first < count; first += kAdamWSegmentsPerLaunch) {
    SegmentTable table{};
    table.count = static_cast<int>(std::min<int64_t>(kAdamWSegmentsPerLaunch, count - first));
    for (int k = 0; k < table.count; ++k) {
      table.seg[k] = segments[first + k];
      if (k > 0 && table.seg[k].offset < table.seg[k - 1].offset + table.seg[k - 1].count)
        throw ShapeError("adamw_step: parameter segments must be sorted and disjoint (segment " +
                         std::to_string(first + k) + ")");
    }
    const int64_t begin = table.seg[0].offset;
    const int64_t end = table.seg[table.count - 1].offset + table.seg[table.count - 1].count;
    if (end <= begin) continue;
    adamw_kernel<<<grid_stride_blocks(end - begin, 256), 256, 0, compute_stream()>>>(
        p, g, m, v, shadow_bf16, shadow_f16, shadow_begin, shadow_end, table, begin, end, beta1,
        beta2, eps, scalars);
    FTUNE_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace ftune::cuda
