// Attention: argument checks and dispatch.
#include "ops/attention.h"

#include "core/thread_pool.h"
#include "ops/dispatch.h"

namespace ftune {
namespace {

cpu::AttentionDims check_attention(const char* op, const TensorView& qkv,
                                   const TensorView& key_mask, const TensorView& probs,
                                   int num_heads, float dropout_p, const TensorView& workspace,
                                   const DropoutRows& rows) {
  if (qkv.rank() != 3 || qkv.dim(2) % 3 != 0)
    throw ShapeError(fmt::format("{}: qkv must be (B, T, 3C), got {}", op, qkv.shape.str()));
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3;
  if (num_heads <= 0 || C % num_heads != 0)
    throw ShapeError(
        fmt::format("{}: hidden size {} is not divisible by {} heads", op, C, num_heads));
  check_f32(op, "qkv", qkv, qkv.shape);
  check_shape(op, "key_mask", key_mask, Shape{B, T});
  check_dtype(op, "key_mask", key_mask, DType::I32);
  check_contiguous(op, "key_mask", key_mask);
  check_f32(op, "probs", probs, Shape{B, num_heads, T, T});
  if (!(dropout_p >= 0.0f && dropout_p < 1.0f))
    throw ShapeError(fmt::format("{}: dropout p = {} outside [0, 1)", op, dropout_p));
  const int64_t D = C / num_heads;
  check_dtype(op, "workspace", workspace, DType::F32);
  if (workspace.numel() < attention_workspace(T, D))
    throw ShapeError(fmt::format("{}: workspace of {} floats, needs {}", op, workspace.numel(),
                                 attention_workspace(T, D)));
  const int64_t Tv = rows.stream_seq > 0 ? rows.stream_seq : T;
  if (Tv < T)
    throw ShapeError(
        fmt::format("{}: sequence length {} exceeds the dropout stream's {}", op, T, Tv));
  return {B, T, num_heads, D, rows.row0, Tv};
}

}  // namespace

int64_t attention_workspace(int64_t T, int64_t D) {
  return compute_threads() * cpu::attention_workspace_per_thread(T, D);
}

void attention_forward(TensorView out, TensorView probs, TensorView qkv, TensorView key_mask,
                       int num_heads, float dropout_p, RngKey rng, TensorView workspace,
                       const DropoutRows& rows) {
  const char* op = "attention_forward";
  const cpu::AttentionDims d =
      check_attention(op, qkv, key_mask, probs, num_heads, dropout_p, workspace, rows);
  check_f32(op, "out", out, Shape{d.B, d.T, d.H * d.D});
  const Device dev = common_device(op, {out, probs, qkv, key_mask, workspace});
  FTUNE_DISPATCH(op, dev,
                 cpu::attention_forward(out.data_as<float>(), probs.data_as<float>(),
                                        qkv.data_as<float>(), key_mask.data_as<int32_t>(), d,
                                        dropout_p, rng, workspace.data_as<float>()),
                 cuda::attention_forward(out.data_as<float>(), probs.data_as<float>(),
                                         qkv.data_as<float>(), key_mask.data_as<int32_t>(), d,
                                         dropout_p, rng));
}

void attention_backward(TensorView dqkv, TensorView dout, TensorView qkv, TensorView probs,
                        TensorView key_mask, int num_heads, float dropout_p, RngKey rng,
                        TensorView workspace, const DropoutRows& rows) {
  const char* op = "attention_backward";
  const cpu::AttentionDims d =
      check_attention(op, qkv, key_mask, probs, num_heads, dropout_p, workspace, rows);
  check_f32(op, "dout", dout, Shape{d.B, d.T, d.H * d.D});
  check_f32(op, "dqkv", dqkv, qkv.shape);
  const Device dev = common_device(op, {dqkv, dout, qkv, probs, key_mask, workspace});
  FTUNE_DISPATCH(
      op, dev,
      cpu::attention_backward(dqkv.data_as<float>(), dout.data_as<float>(), qkv.data_as<float>(),
                              probs.data_as<float>(), key_mask.data_as<int32_t>(), d, dropout_p,
                              rng, workspace.data_as<float>()),
      cuda::attention_backward(dqkv.data_as<float>(), dout.data_as<float>(), qkv.data_as<float>(),
                               probs.data_as<float>(), key_mask.data_as<int32_t>(), d, dropout_p,
                               rng, workspace.data_as<float>(), workspace.numel()));
}

}  // namespace ftune
