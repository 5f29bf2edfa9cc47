// Argument checks shared by all ops.
#include "ops/dispatch.h"

#include <atomic>
#include <mutex>
#include <string>

#include <spdlog/spdlog.h>

#include "core/env_flag.h"

#ifdef FTUNE_WITH_CUDA
#include "cuda/cuda_device.h"
#include "cuda/graph.h"
#endif

namespace ftune {

void cuda_kernel_missing(const char* op) {
  throw NotBuiltError(fmt::format("{}: no CUDA kernel yet (the CUDA backend issue adds it)", op));
}

namespace {
std::atomic<int> g_debug_sync{-1};  // -1: not decided yet (FTUNE_CUDA_DEBUG_SYNC decides)
}  // namespace

bool cuda_debug_sync() {
  int on = g_debug_sync.load(std::memory_order_relaxed);
  if (on < 0) {
    on = env_flag("FTUNE_CUDA_DEBUG_SYNC") ? 1 : 0;
    g_debug_sync.store(on, std::memory_order_relaxed);
    if (on) spdlog::warn("FTUNE_CUDA_DEBUG_SYNC: every GPU op is synchronised and checked (slow)");
  }
  return on == 1;
}

void set_cuda_debug_sync(bool on) {
  g_debug_sync.store(on ? 1 : 0, std::memory_order_relaxed);
}

void cuda_debug_sync_after(const char* op) {
  if (!cuda_debug_sync()) return;
#ifdef FTUNE_WITH_CUDA
  if (cuda::compute_stream_capturing()) {
    static std::once_flag warned;
    std::call_once(warned, [op] {
      spdlog::warn("FTUNE_CUDA_DEBUG_SYNC: ops inside a CUDA graph capture ({} and the rest) "
                   "cannot be synchronised and are not checked; training.cuda_graphs off checks "
                   "every op",
                   op);
    });
    return;
  }
  cuda::synchronize_and_check(fmt::format("FTUNE_CUDA_DEBUG_SYNC: after {}", op));
#else
  (void)op;
#endif
}

Device common_device(const char* op, std::initializer_list<TensorView> views) {
  const TensorView* first = nullptr;
  for (const TensorView& v : views) {
    if (!v.defined()) continue;
    if (!first)
      first = &v;
    else if (!(v.device == first->device))
      throw ShapeError(fmt::format("{}: tensors on different devices ({} and {})", op,
                                   device_name(first->device), device_name(v.device)));
  }
  if (!first) throw ShapeError(fmt::format("{}: no tensors given", op));
  return first->device;
}

void check_dtype(const char* op, const char* arg, const TensorView& v, DType dtype) {
  if (v.dtype != dtype)
    throw ShapeError(fmt::format("{}: {} has dtype {}, expected {}", op, arg, dtype_name(v.dtype),
                                 dtype_name(dtype)));
}

void check_shape(const char* op, const char* arg, const TensorView& v, const Shape& expected) {
  if (!v.defined()) throw ShapeError(fmt::format("{}: {} is missing", op, arg));
  if (!(v.shape == expected))
    throw ShapeError(
        fmt::format("{}: {} has shape {}, expected {}", op, arg, v.shape.str(), expected.str()));
}

void check_contiguous(const char* op, const char* arg, const TensorView& v) {
  if (!v.is_contiguous()) throw ShapeError(fmt::format("{}: {} must be contiguous", op, arg));
}

void check_f32(const char* op, const char* arg, const TensorView& v, const Shape& expected) {
  check_shape(op, arg, v, expected);
  check_dtype(op, arg, v, DType::F32);
  check_contiguous(op, arg, v);
}

bool is_float_type(DType dtype) {
  return dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16;
}

void check_float(const char* op, const char* arg, const TensorView& v, const Shape& expected) {
  check_shape(op, arg, v, expected);
  if (!is_float_type(v.dtype))
    throw ShapeError(fmt::format("{}: {} has dtype {}, expected f32, bf16 or f16", op, arg,
                                 dtype_name(v.dtype)));
  check_contiguous(op, arg, v);
}

int64_t row_stride(const char* op, const char* arg, const TensorView& v, int64_t rows,
                   int64_t cols) {
  if (v.rank() != 2 || v.dim(0) != rows || v.dim(1) != cols)
    throw ShapeError(
        fmt::format("{}: {} has shape {}, expected ({}, {})", op, arg, v.shape.str(), rows, cols));
  check_dtype(op, arg, v, DType::F32);
  return row_stride_float(op, arg, v, rows, cols);
}

int64_t row_stride_float(const char* op, const char* arg, const TensorView& v, int64_t rows,
                         int64_t cols) {
  if (v.rank() != 2 || v.dim(0) != rows || v.dim(1) != cols)
    throw ShapeError(
        fmt::format("{}: {} has shape {}, expected ({}, {})", op, arg, v.shape.str(), rows, cols));
  if (!is_float_type(v.dtype))
    throw ShapeError(fmt::format("{}: {} has dtype {}, expected f32, bf16 or f16", op, arg,
                                 dtype_name(v.dtype)));
  if (cols > 1 && v.strides[1] != 1)
    throw ShapeError(fmt::format("{}: {} must have a contiguous inner dimension", op, arg));
  if (rows > 1 && v.strides[0] < cols)
    throw ShapeError(
        fmt::format("{}: {} rows overlap (stride {} < {})", op, arg, v.strides[0], cols));
  return rows > 1 ? v.strides[0] : cols;
}

}  // namespace ftune
