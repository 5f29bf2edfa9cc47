// Cast on the CPU, and the fp32 staging of 16-bit tensors (ops/cast.h): plain conversion loops
// split across threads, through core/dtype.h's round-to-nearest-even conversions.
#include <algorithm>
#include <array>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cast.h"

namespace ftune::cpu {
namespace {

float load(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32:
      return static_cast<const float*>(p)[i];
    case DType::BF16:
      return bf16_to_float(static_cast<const bf16_t*>(p)[i]);
    case DType::F16:
      return f16_to_float(static_cast<const f16_t*>(p)[i]);
    default:
      break;
  }
  throw InternalError("cast: not a float type");
}

// Converts the contiguous run [0, n) of p (type t) to fp32.
void load_run(float* dst, const void* p, DType t, int64_t n) {
  if (t == DType::F32) {
    std::copy(static_cast<const float*>(p), static_cast<const float*>(p) + n, dst);
  } else if (t == DType::BF16) {
    const bf16_t* s = static_cast<const bf16_t*>(p);
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = load(p, t, i);
  }
}

void store_run(void* p, DType t, const float* src, int64_t n) {
  if (t == DType::F32) {
    std::copy(src, src + n, static_cast<float*>(p));
  } else if (t == DType::BF16) {
    bf16_t* d = static_cast<bf16_t*>(p);
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
  } else if (t == DType::F16) {
    f16_t* d = static_cast<f16_t*>(p);
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_f16(src[i]);
  } else {
    throw InternalError("cast: not a float type");
  }
}

const char* offset(const void* p, DType t, int64_t elements) {
  return static_cast<const char*>(p) + elements * static_cast<int64_t>(dtype_size(t));
}

}  // namespace

void cast(void* out, DType out_type, const void* inp, DType inp_type, int64_t n) {
  constexpr int64_t kChunk = 4096;
  parallel_for((n + kChunk - 1) / kChunk,
               [&](int64_t c0, int64_t c1) {
                 float tmp[kChunk];
                 for (int64_t c = c0; c < c1; ++c) {
                   const int64_t b = c * kChunk, len = std::min(kChunk, n - b);
                   load_run(tmp, offset(inp, inp_type, b), inp_type, len);
                   store_run(const_cast<char*>(offset(out, out_type, b)), out_type, tmp, len);
                 }
               },
               1);
}

float* staging(int slot, int64_t n) {
  FTUNE_ASSERT(slot >= 0 && slot < kStagingSlots, "staging slot {}", slot);
  thread_local std::array<std::vector<float>, kStagingSlots> slots;
  std::vector<float>& s = slots[slot];
  if (static_cast<int64_t>(s.size()) < n) s.resize(static_cast<size_t>(n));
  return s.data();
}

const float* stage_f32(const void* data, DType dtype, int64_t rows, int64_t cols, int64_t ld,
                       int slot, int64_t* ld_out) {
  if (dtype == DType::F32) {
    *ld_out = ld;
    return static_cast<const float*>(data);
  }
  float* dst = staging(slot, rows * cols);
  parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          load_run(dst + r * cols, offset(data, dtype, r * ld), dtype, cols);
      },
      std::max<int64_t>(1, 4096 / std::max<int64_t>(cols, 1)));
  *ld_out = cols;
  return dst;
}

void store_f32(void* data, DType dtype, const float* src, int64_t rows, int64_t cols, int64_t ld) {
  parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          store_run(const_cast<char*>(offset(data, dtype, r * ld)), dtype, src + r * cols, cols);
      },
      std::max<int64_t>(1, 4096 / std::max<int64_t>(cols, 1)));
}

}  // namespace ftune::cpu
