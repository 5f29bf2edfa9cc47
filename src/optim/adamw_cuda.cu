// AdamW's update on CUDA; mirrors optim/adamw_cpu.cc element for element (the same expressions
// in the same order, see adamw.h for the equations). All parameter segments are updated by one
// launch: the segment table (offset, count, LR, decay, step size per parameter tensor) travels as
// a __grid_constant__ kernel parameter, and a grid-stride loop covers the flat range from the
// first segment's start to the last one's end; each thread finds the segment of its first element
// by binary search and then walks forward (its indices only increase). Elements between segments,
// if any, are left alone, as on the CPU. The step's scalars come from the device (step_scalars.h):
// a skipped step returns before touching anything; the clip coefficient and t are read once per
// thread, and the step size lr / (1 - beta1^t) once per segment a thread enters. The bf16 / f16
// shadow of the weights, when given, is written from the updated value in the same pass for the
// elements it covers, [shadow_begin, shadow_end). Memory moves in 128-bit accesses (four elements
// of each fp32 tensor, cuda/vec.cuh) wherever a group of four lies inside one segment.
#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "cuda/vec.cuh"
#include "optim/adamw.h"
#include "optim/step_scalars.h"

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

// One element's update: the CPU's expressions in the CPU's order (optim/adamw_cpu.cc).
__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v, float lr,
                                              float weight_decay, float beta1, float beta2,
                                              float eps, float step_size,
                                              float bias_correction2_sqrt, float grad_scale) {
  // Every operation rounded on its own (__f*_rn are never contracted into FMAs): nvcc contracts
  // a * b + c differently where this is inlined into the vector and the scalar loop, which gave
  // 1-ulp differences between placements of the same tensor on an H200.
  const float gi = __fmul_rn(g, grad_scale);
  if (weight_decay != 0.0f) p = __fmul_rn(p, __fsub_rn(1.0f, __fmul_rn(lr, weight_decay)));
  // torch: exp_avg.lerp_(grad, 1 - beta1)
  m = __fadd_rn(m, __fmul_rn(__fsub_rn(gi, m), __fsub_rn(1.0f, beta1)));
  v = __fadd_rn(__fmul_rn(v, beta2), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, beta2), gi), gi));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), bias_correction2_sqrt), eps);
  p = __fsub_rn(p, __fdiv_rn(__fmul_rn(step_size, m), denom));
}

// Threads walk groups of four elements [4q, 4q + 4) (grid-stride). kVec (p, g, m, v 16-byte
// aligned): a group inside one segment moves as one float4 per tensor, and its shadow as one
// 64-bit store when the group lies inside the shadow and shadow_vec (the shadow's groups 8-byte
// aligned); any other group (across a segment or shadow bound, or !kVec) goes element by element.
// Both ways run adamw_element on each element: the same bits.
template <bool kVec>
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, bf16_t* shadow_bf16,
                             f16_t* shadow_f16, int64_t shadow_begin, int64_t shadow_end,
                             bool shadow_vec, const __grid_constant__ SegmentTable table,
                             int64_t begin, int64_t end, float beta1, float beta2, float eps,
                             const double* scalars, bool lr_from_scalars) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t q_end = (end + 3) / 4;
  int64_t q = begin / 4 + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= q_end) return;
  if (scalars[kStepOk] == 0.0) return;  // a skipped step: nothing is touched
  const float grad_scale = static_cast<float>(scalars[kClipCoef]);
  // apply_scheduled: a segment carries its LR scale and the step's rate is read here (the same
  // f32 product as the host's lr x scale).
  const float step_lr = lr_from_scalars ? static_cast<float>(scalars[kLearningRate]) : 1.0f;
  const auto seg_lr = [&](const AdamWSegment& seg) {
    return lr_from_scalars ? step_lr * seg.lr : seg.lr;
  };
  const AdamWBiasCorrection bc = adamw_bias_correction(beta1, beta2, scalars[kAdamSteps]);
  const float bias_correction2_sqrt = bc.bc2_sqrt;
  const bool shadowed = shadow_bf16 || shadow_f16;
  int s = find_segment(table, std::max(4 * q, begin));
  int sized = -1;  // the segment step_size belongs to
  float step_size = 0.0f;
  for (; q < q_end; q += stride) {
    const int64_t g0 = 4 * q;
    if constexpr (kVec) {
      while (s < table.count && g0 >= table.seg[s].offset + table.seg[s].count) ++s;
      if (s == table.count) return;
      const AdamWSegment& seg = table.seg[s];
      const bool in_segment = g0 >= seg.offset && g0 + 4 <= seg.offset + seg.count;
      const bool no_shadow = !shadowed || g0 + 4 <= shadow_begin || g0 >= shadow_end;
      const bool whole_shadow =
          shadowed && shadow_vec && g0 >= shadow_begin && g0 + 4 <= shadow_end;
      if (in_segment && (no_shadow || whole_shadow)) {
        if (sized != s) {
          step_size = static_cast<float>(double(seg_lr(seg)) / bc.bc1);
          sized = s;
        }
        float pv[4], gv[4], mv[4], vv[4];
        load_vec<4>(p + g0, pv);
        load_vec<4>(g + g0, gv);
        load_vec<4>(m + g0, mv);
        load_vec<4>(v + g0, vv);
#pragma unroll
        for (int j = 0; j < 4; ++j)
          adamw_element(pv[j], gv[j], mv[j], vv[j], seg_lr(seg), seg.weight_decay, beta1, beta2, eps,
                        step_size, bias_correction2_sqrt, grad_scale);
        store_vec<4>(p + g0, pv);
        store_vec<4>(m + g0, mv);
        store_vec<4>(v + g0, vv);
        if (whole_shadow) {
          if (shadow_bf16) store_vec<4>(shadow_bf16 + (g0 - shadow_begin), pv);
          if (shadow_f16) store_vec<4>(shadow_f16 + (g0 - shadow_begin), pv);
        }
        continue;
      }
    }
    for (int64_t i = std::max(g0, begin); i < g0 + 4 && i < end; ++i) {
      while (s < table.count && i >= table.seg[s].offset + table.seg[s].count) ++s;
      if (s == table.count) return;
      const AdamWSegment& seg = table.seg[s];
      if (i < seg.offset) continue;  // between segments
      if (sized != s) {
        step_size = static_cast<float>(double(seg_lr(seg)) / bc.bc1);
        sized = s;
      }
      float pi = p[i], mi = m[i], vi = v[i];
      adamw_element(pi, g[i], mi, vi, seg_lr(seg), seg.weight_decay, beta1, beta2, eps, step_size,
                    bias_correction2_sqrt, grad_scale);
      p[i] = pi;
      m[i] = mi;
      v[i] = vi;
      if (i >= shadow_begin && i < shadow_end) {
        if (shadow_bf16) shadow_bf16[i - shadow_begin] = float_to_bf16(pi);
        if (shadow_f16) shadow_f16[i - shadow_begin] = float_to_f16(pi);
      }
    }
  }
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, bf16_t* shadow_bf16,
                  f16_t* shadow_f16, int64_t shadow_begin, int64_t shadow_end,
                  const AdamWSegment* segments, int64_t count, float beta1, float beta2,
                  float eps, const double* scalars, bool lr_from_scalars) {
  // 128-bit accesses need aligned tensors (arena buffers are); the shadow's 64-bit stores of four
  // elements need its group starts, element 4k - shadow_begin, 8-byte aligned.
  const bool vec = all_aligned16(p, g, m, v);
  const void* shadow = shadow_bf16 ? static_cast<const void*>(shadow_bf16) : shadow_f16;
  const bool shadow_vec =
      shadow && shadow_begin % 4 == 0 && reinterpret_cast<uintptr_t>(shadow) % 8 == 0;
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
    const int64_t groups = (end + 3) / 4 - begin / 4;
    (vec ? adamw_kernel<true> : adamw_kernel<false>)
        <<<grid_stride_blocks(groups, 256), 256, 0, compute_stream()>>>(
            p, g, m, v, shadow_bf16, shadow_f16, shadow_begin, shadow_end, shadow_vec, table,
            begin, end, beta1, beta2, eps, scalars, lr_from_scalars);
    FTUNE_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace ftune::cuda
