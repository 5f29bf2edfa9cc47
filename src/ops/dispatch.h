// The one dispatch point between backends. Every op's <op>.cc checks its arguments, then calls
// FTUNE_DISPATCH(op_name, device, cpu_call, cuda_call). Without FTUNE_CUDA the CUDA branch is not
// even compiled: it throws NotBuiltError, so a CPU-only build links and every CPU test runs. With
// it, the CUDA branch ends with the FTUNE_CUDA_DEBUG_SYNC check (below). op_name (a string
// literal) also names the op in the per-op step profile (core/op_profile.h).
#pragma once

#include <fmt/format.h>

#include <initializer_list>

#include "core/error.h"
#include "core/op_profile.h"
#include "core/tensor.h"

#ifdef FTUNE_WITH_CUDA
#define FTUNE_CUDA_BRANCH(op_name, cuda_call) \
  do {                                        \
    cuda_call;                                \
    ::ftune::cuda_debug_sync_after(op_name);  \
  } while (0)
#else
#define FTUNE_CUDA_BRANCH(op_name, cuda_call) \
  throw ::ftune::NotBuiltError(fmt::format("{}: ftune was built without CUDA", op_name))
#endif

#define FTUNE_DISPATCH(op_name, device, cpu_call, cuda_call) \
  do {                                                       \
    ::ftune::profile::OpScope ftune_op_scope_(op_name, device); \
    switch ((device).kind) {                                 \
      case ::ftune::DeviceKind::CPU: {                       \
        cpu_call;                                            \
        break;                                               \
      }                                                      \
      case ::ftune::DeviceKind::CUDA: {                      \
        FTUNE_CUDA_BRANCH(op_name, cuda_call);               \
        break;                                               \
      }                                                      \
    }                                                        \
  } while (0)

namespace ftune {

// For ops whose CUDA twin is not written yet: a clear error instead of a silent CPU fallback.
[[noreturn]] void cuda_kernel_missing(const char* op);

// FTUNE_CUDA_DEBUG_SYNC=1 (core/env_flag.h; off by default; read at the first GPU op): after
// every op on a GPU, wait for the compute stream and check for an error, so that a fault (an
// illegal address, a failed launch) is reported as "FTUNE_CUDA_DEBUG_SYNC: after <op>: <CUDA
// error>" by the op that caused it instead of at the next synchronisation, which in a training run
// is the log interval. It removes all overlap between the host and the GPU: a debugging switch.
// Inside a CUDA graph capture nothing can be synchronised: the check is skipped there, with one
// warning per process (run with training.cuda_graphs off to check every op).
// set_cuda_debug_sync overrides the environment.
bool cuda_debug_sync();
void set_cuda_debug_sync(bool on);
void cuda_debug_sync_after(const char* op);  // called by FTUNE_DISPATCH's CUDA branch

// Argument checks shared by every op; each throws ShapeError naming the op and the argument.
// The device all (defined) views share; throws if they differ.
Device common_device(const char* op, std::initializer_list<TensorView> views);
void check_dtype(const char* op, const char* arg, const TensorView& v, DType dtype);
void check_shape(const char* op, const char* arg, const TensorView& v, const Shape& expected);
void check_contiguous(const char* op, const char* arg, const TensorView& v);
// Checks dtype f32, contiguity and shape in one go (the common case on the CPU path).
void check_f32(const char* op, const char* arg, const TensorView& v, const Shape& expected);
// The same for a floating-point storage type: f32, bf16 or f16 (mixed precision's activations).
void check_float(const char* op, const char* arg, const TensorView& v, const Shape& expected);
bool is_float_type(DType dtype);
// A 2-D f32 view of (rows, cols) with a contiguous inner dimension and non-overlapping rows
// (e.g. the first token of every sequence): returns its row stride.
int64_t row_stride(const char* op, const char* arg, const TensorView& v, int64_t rows,
                   int64_t cols);
// The same for any floating-point storage type (f32, bf16, f16).
int64_t row_stride_float(const char* op, const char* arg, const TensorView& v, int64_t rows,
                         int64_t cols);

}  // namespace ftune
