// Attention: argument checks and dispatch.
#include "ops/attention.h"

#include "core/gpu_paths.h"
#include "core/thread_pool.h"
#include "ops/cast.h"
#include "ops/attention_cudnn.h"
#include "ops/dispatch.h"

namespace ftune {
namespace {

cpu::AttentionDims check_attention(const char* op, const TensorView& qkv,
                                   const TensorView& key_mask, const TensorView& probs,
                                   int num_heads, float dropout_p, const TensorView& workspace,
                                   const DropoutRows& rows, bool backward) {
  if (qkv.rank() != 3 || qkv.dim(2) % 3 != 0)
    throw ShapeError(fmt::format("{}: qkv must be (B, T, 3C), got {}", op, qkv.shape.str()));
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3;
  if (num_heads <= 0 || C % num_heads != 0)
    throw ShapeError(
        fmt::format("{}: hidden size {} is not divisible by {} heads", op, C, num_heads));
  check_float(op, "qkv", qkv, qkv.shape);
  check_shape(op, "key_mask", key_mask, Shape{B, T});
  check_dtype(op, "key_mask", key_mask, DType::I32);
  check_contiguous(op, "key_mask", key_mask);
  if (probs.rank() == 1) {  // cuDNN's state (ops/attention_cudnn.h); sized where it is used
    check_dtype(op, "probs", probs, DType::F32);
    check_contiguous(op, "probs", probs);
  } else {
    check_f32(op, "probs", probs, Shape{B, num_heads, T, T});
  }
  if (!(dropout_p >= 0.0f && dropout_p < 1.0f))
    throw ShapeError(fmt::format("{}: dropout p = {} outside [0, 1)", op, dropout_p));
  const int64_t D = C / num_heads;
  check_dtype(op, "workspace", workspace, DType::F32);
  const int64_t needed = attention_workspace_min(workspace.device, T, D, backward);
  if (workspace.numel() < needed)
    throw ShapeError(
        fmt::format("{}: workspace of {} floats, needs {}", op, workspace.numel(), needed));
  const int64_t Tv = rows.stream_seq > 0 ? rows.stream_seq : T;
  if (Tv < T)
    throw ShapeError(
        fmt::format("{}: sequence length {} exceeds the dropout stream's {}", op, T, Tv));
  return {B, T, num_heads, D, rows.row0, Tv};
}

// qkv, out, dout and dqkv share one storage type (f32, or bf16 / f16 under mixed precision).
void check_same_dtype(const char* op, const TensorView& qkv,
                      std::initializer_list<std::pair<const char*, TensorView>> others) {
  for (const auto& [name, v] : others)
    if (v.dtype != qkv.dtype)
      throw ShapeError(fmt::format("{}: {} has dtype {} but qkv has {}", op, name,
                                   dtype_name(v.dtype), dtype_name(qkv.dtype)));
}

// ftune's kernels write and read (B, H, T, T) probabilities from the start of probs: a flat
// buffer planned for cuDNN's state must be that large.
void check_ftune_probs(const char* op, const TensorView& probs, const cpu::AttentionDims& d) {
  const Shape shape{d.B, d.H, d.T, d.T};
  if (probs.rank() == 1 && probs.numel() < shape.numel())
    throw ShapeError(fmt::format(
        "{}: ftune's kernel needs {} floats of probabilities for B={} T={} H={}, but the buffer "
        "holds {} (it was planned for cuDNN's flash attention, which keeps no probabilities); "
        "plan with training.attention: ftune",
        op, shape.numel(), d.B, d.T, d.H, probs.numel()));
}

}  // namespace

int64_t attention_workspace(int64_t T, int64_t D) {
  return compute_threads() * cpu::attention_workspace_per_thread(T, D);
}

int64_t attention_workspace(Device device, int64_t B, int64_t H, int64_t T, int64_t D,
                            bool backward) {
  if (device.is_cpu()) return attention_workspace(T, D);
  return backward ? B * H * T : 0;
}

int64_t attention_workspace_min(Device device, int64_t T, int64_t D, bool backward) {
  if (device.is_cpu()) return attention_workspace(T, D);
  return backward ? T : 0;
}

void attention_forward(TensorView out, TensorView probs, TensorView qkv, TensorView key_mask,
                       int num_heads, float dropout_p, RngKey rng, TensorView workspace,
                       const DropoutRows& rows) {
  const char* op = "attention_forward";
  const cpu::AttentionDims d =
      check_attention(op, qkv, key_mask, probs, num_heads, dropout_p, workspace, rows, false);
  check_float(op, "out", out, Shape{d.B, d.T, d.H * d.D});
  check_same_dtype(op, qkv, {{"out", out}});
  const Device dev = common_device(op, {out, probs, qkv, key_mask, workspace});
  // On CUDA in 16 bits cuDNN may run: it checks a flat buffer itself (ops/attention_cudnn.h).
  if (qkv.dtype == DType::F32 || dev.is_cpu()) check_ftune_probs(op, probs, d);
  if (qkv.dtype != DType::F32) {
    const int64_t n_qkv = qkv.numel(), n_out = out.numel();
    FTUNE_DISPATCH(op, dev,
                   {
                     int64_t ld;
                     const float* x = cpu::stage_f32(qkv.data, qkv.dtype, 1, n_qkv, n_qkv, 0, &ld);
                     float* y = cpu::staging(1, n_out);
                     cpu::attention_forward(y, probs.data_as<float>(), x,
                                            key_mask.data_as<int32_t>(), d, dropout_p, rng,
                                            workspace.data_as<float>());
                     cpu::store_f32(out.data, out.dtype, y, 1, n_out, n_out);
                   },
                   {
                     if (!try_cudnn_attention_forward(out, probs, qkv, key_mask, d, dropout_p, rng,
                                                      workspace))
                       cuda::attention_forward_16(out.data, probs.data_as<float>(), qkv.data,
                                                  qkv.dtype, key_mask.data_as<int32_t>(), d,
                                                  dropout_p, rng);
                   });
    return;
  }
  FTUNE_DISPATCH(op, dev,
                 cpu::attention_forward(out.data_as<float>(), probs.data_as<float>(),
                                        qkv.data_as<float>(), key_mask.data_as<int32_t>(), d,
                                        dropout_p, rng, workspace.data_as<float>()),
                 (count_gpu_path(GpuPath::AttentionFtune),
                  cuda::attention_forward(out.data_as<float>(), probs.data_as<float>(),
                                          qkv.data_as<float>(), key_mask.data_as<int32_t>(), d,
                                          dropout_p, rng)));
}

void attention_backward(TensorView dqkv, TensorView dout, TensorView qkv, TensorView probs,
                        TensorView key_mask, int num_heads, float dropout_p, RngKey rng,
                        TensorView workspace, const DropoutRows& rows, TensorView out) {
  const char* op = "attention_backward";
  const cpu::AttentionDims d =
      check_attention(op, qkv, key_mask, probs, num_heads, dropout_p, workspace, rows, true);
  check_float(op, "dout", dout, Shape{d.B, d.T, d.H * d.D});
  check_float(op, "dqkv", dqkv, qkv.shape);
  check_same_dtype(op, qkv, {{"dout", dout}, {"dqkv", dqkv}});
  const Device dev = common_device(op, {dqkv, dout, qkv, probs, key_mask, workspace});
  // On CUDA in 16 bits cuDNN may run: it checks a flat buffer itself (ops/attention_cudnn.h).
  if (qkv.dtype == DType::F32 || dev.is_cpu()) check_ftune_probs(op, probs, d);
  if (qkv.dtype != DType::F32) {
    const int64_t n_qkv = qkv.numel(), n_out = dout.numel();
    FTUNE_DISPATCH(op, dev,
                   {
                     int64_t ld;
                     const float* x = cpu::stage_f32(qkv.data, qkv.dtype, 1, n_qkv, n_qkv, 0, &ld);
                     const float* dy =
                         cpu::stage_f32(dout.data, dout.dtype, 1, n_out, n_out, 1, &ld);
                     float* dx = cpu::staging(2, n_qkv);
                     cpu::attention_backward(dx, dy, x, probs.data_as<float>(),
                                             key_mask.data_as<int32_t>(), d, dropout_p, rng,
                                             workspace.data_as<float>());
                     cpu::store_f32(dqkv.data, dqkv.dtype, dx, 1, n_qkv, n_qkv);
                   },
                   {
                     if (!try_cudnn_attention_backward(dqkv, dout, qkv, out, probs, key_mask, d,
                                                       dropout_p, rng, workspace))
                       cuda::attention_backward_16(dqkv.data, dout.data, qkv.data, qkv.dtype,
                                                   probs.data_as<float>(),
                                                   key_mask.data_as<int32_t>(), d, dropout_p, rng,
                                                   workspace.data_as<float>(), workspace.numel());
                   });
    return;
  }
  FTUNE_DISPATCH(
      op, dev,
      cpu::attention_backward(dqkv.data_as<float>(), dout.data_as<float>(), qkv.data_as<float>(),
                              probs.data_as<float>(), key_mask.data_as<int32_t>(), d, dropout_p,
                              rng, workspace.data_as<float>()),
      (count_gpu_path(GpuPath::AttentionFtune),
       cuda::attention_backward(dqkv.data_as<float>(), dout.data_as<float>(),
                                qkv.data_as<float>(), probs.data_as<float>(),
                                key_mask.data_as<int32_t>(), d, dropout_p, rng,
                                workspace.data_as<float>(), workspace.numel())));
}

}  // namespace ftune
