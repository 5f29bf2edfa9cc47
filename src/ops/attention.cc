// Attention: argument checks, the one dispatch point, the buffer sizes the planner reserves, and
// the fused-QKV entry point of BERT-style encoders (ops/attention.h).
#include "ops/attention.h"

#include <cmath>

#include "core/gpu_paths.h"
#include "core/tensor_columns.h"
#include "core/thread_pool.h"
#include "ops/attention_cudnn.h"
#include "ops/cast.h"
#include "ops/dispatch.h"

namespace ftune {
namespace {

void check_spec(const char* op, const AttentionSpec& s) {
  if (s.heads <= 0 || s.kv_heads <= 0 || s.heads % s.kv_heads != 0)
    throw ShapeError(fmt::format(
        "{}: {} query heads and {} key/value heads (the kv heads must divide the query heads)", op,
        s.heads, s.kv_heads));
  if (s.head_dim <= 0) throw ShapeError(fmt::format("{}: head size {}", op, s.head_dim));
  if (!(s.scale > 0.0f) || !std::isfinite(s.scale))
    throw ShapeError(fmt::format("{}: scale {} (set a positive scale, e.g. "
                                 "default_attention_scale(head_dim))",
                                 op, s.scale));
  if (!(s.softcap >= 0.0f) || !std::isfinite(s.softcap))
    throw ShapeError(fmt::format("{}: softcap {} (0 turns it off)", op, s.softcap));
  if (s.window.left < -1 || s.window.right < -1)
    throw ShapeError(fmt::format("{}: window ({}, {}): each side is -1 (unbounded) or >= 0", op,
                                 s.window.left, s.window.right));
}

// q, k, v (or dq, dk, dv, out, dout) share one storage type.
void check_same_dtype(const char* op, DType dtype,
                      std::initializer_list<std::pair<const char*, TensorView>> views) {
  for (const auto& [name, v] : views)
    if (v.dtype != dtype)
      throw ShapeError(fmt::format("{}: {} has dtype {} but q has {}", op, name,
                                   dtype_name(v.dtype), dtype_name(dtype)));
}

// cu_seqlens on the CPU, read before any kernel runs (on a GPU its values are the caller's
// promise: reading them would cost a host round trip per call).
void check_cu_seqlens_on_host(const char* op, const int32_t* cu, int64_t B, int64_t T, int64_t N) {
  if (cu[0] != 0)
    throw ShapeError(fmt::format("{}: cu_seqlens[0] is {}, expected 0", op, cu[0]));
  for (int64_t b = 0; b < B; ++b)
    if (cu[b + 1] < cu[b] || cu[b + 1] - cu[b] > T)
      throw ShapeError(fmt::format(
          "{}: sequence {} spans tokens [{}, {}): lengths must be in [0, max_seq = {}]", op, b,
          cu[b], cu[b + 1], T));
  if (cu[B] != N)
    throw ShapeError(fmt::format("{}: cu_seqlens[{}] is {}, but the call has {} tokens", op, B,
                                 cu[B], N));
}

// Everything but the strides and data pointers: the shapes of the call, checked.
AttentionArgs check_call(const char* op, const AttentionCall& c, const TensorView& q,
                         const TensorView& k, const TensorView& v, const TensorView& saved,
                         bool backward) {
  check_spec(op, c.spec);
  const AttentionRows& r = c.rows;
  AttentionArgs a;
  a.spec = c.spec;
  a.B = r.batch;
  a.T = r.max_seq;
  if (a.B < 0 || a.T < 0)
    throw ShapeError(fmt::format("{}: batch {} and max_seq {}", op, a.B, a.T));
  if (q.rank() != 2)
    throw ShapeError(fmt::format("{}: q must be (tokens, heads x head_dim), got {}", op,
                                 q.shape.str()));
  const int64_t N = q.dim(0);
  if (r.cu_seqlens.defined()) {
    check_shape(op, "cu_seqlens", r.cu_seqlens, Shape{a.B + 1});
    check_dtype(op, "cu_seqlens", r.cu_seqlens, DType::I32);
    check_contiguous(op, "cu_seqlens", r.cu_seqlens);
    if (r.cu_seqlens.device.is_cpu())
      check_cu_seqlens_on_host(op, r.cu_seqlens.data_as<int32_t>(), a.B, a.T, N);
    a.cu_seqlens = r.cu_seqlens.data_as<int32_t>();
  } else if (N != a.B * a.T) {
    throw ShapeError(fmt::format("{}: the padded layout of {} rows of {} tokens has {} tokens, q "
                                 "has {} (pass cu_seqlens for packed rows)",
                                 op, a.B, a.T, a.B * a.T, N));
  }
  if (r.key_mask.defined()) {
    if (r.key_mask.numel() != N)
      throw ShapeError(fmt::format("{}: key_mask has {} elements for {} tokens", op,
                                   r.key_mask.numel(), N));
    check_dtype(op, "key_mask", r.key_mask, DType::I32);
    check_contiguous(op, "key_mask", r.key_mask);
    a.key_mask = r.key_mask.data_as<int32_t>();
  }
  const int64_t Cq = c.spec.heads * c.spec.head_dim, Ckv = c.spec.kv_heads * c.spec.head_dim;
  a.ldq = row_stride_float(op, "q", q, N, Cq);
  a.ldk = row_stride_float(op, "k", k, N, Ckv);
  a.ldv = row_stride_float(op, "v", v, N, Ckv);
  check_same_dtype(op, q.dtype, {{"k", k}, {"v", v}});
  if (!(c.dropout_p >= 0.0f && c.dropout_p < 1.0f))
    throw ShapeError(fmt::format("{}: dropout p = {} outside [0, 1)", op, c.dropout_p));
  a.dropout_p = c.dropout_p;
  a.rng = c.rng;
  a.row0 = c.place.row0;
  a.Tv = c.place.stream_seq > 0 ? c.place.stream_seq : a.T;
  if (a.Tv < a.T)
    throw ShapeError(
        fmt::format("{}: sequence length {} exceeds the dropout stream's {}", op, a.T, a.Tv));
  check_dtype(op, "saved", saved, DType::F32);
  check_contiguous(op, "saved", saved);
  check_dtype(op, "workspace", c.workspace, DType::F32);
  const int64_t need = c.workspace.device.is_cpu()
                           ? attention_workspace(a.T, c.spec.head_dim)
                           : (backward ? c.spec.heads * a.T : 0);
  if (c.workspace.numel() < need)
    throw ShapeError(
        fmt::format("{}: workspace of {} floats, needs {}", op, c.workspace.numel(), need));
  return a;
}

// ftune's kernels keep the probabilities in `saved`: N Hq T floats (a buffer planned for cuDNN's
// statistics is far smaller).
void check_ftune_saved(const char* op, const TensorView& saved, const AttentionArgs& a, int64_t N) {
  const int64_t need = N * a.spec.heads * a.T;
  if (saved.numel() < need)
    throw ShapeError(fmt::format(
        "{}: ftune's kernel needs {} floats of probabilities for B={} T={} H={}, but the buffer "
        "holds {} (it was planned for cuDNN's flash attention, which keeps no probabilities); "
        "plan with training.attention: ftune",
        op, need, a.B, a.T, a.spec.heads, saved.numel()));
}

// The one case today's cuDNN graphs take (ops/attention_cudnn.h): BERT's fused QKV, bidirectional,
// equal heads, scale 1/sqrt(D), no window or soft-cap; q, k, v the three column blocks of one
// buffer and out a contiguous one: (B, T, 3C) and (B, T, C) padded, (N, 3C) and (N, C) packed
// (cuDNN's ragged layout). Returns the qkv view.
TensorView fused_qkv(const AttentionArgs& a, const TensorView& q, const TensorView& k,
                     const TensorView& v, int64_t ldo, int64_t Cq) {
  const AttentionSpec& s = a.spec;
  const size_t e = dtype_size(q.dtype);
  const char* base = static_cast<const char*>(q.data);
  const bool fused = s.kv_heads == s.heads && !s.causal && s.window.left < 0 &&
                     s.window.right < 0 && s.softcap == 0.0f &&
                     s.scale == default_attention_scale(s.head_dim) && a.ldq == 3 * Cq &&
                     a.ldk == 3 * Cq && a.ldv == 3 * Cq && ldo == Cq &&
                     static_cast<const char*>(k.data) == base + Cq * e &&
                     static_cast<const char*>(v.data) == base + 2 * Cq * e;
  if (!fused) return {};
  if (a.cu_seqlens) return TensorView(q.data, q.dtype, q.device, Shape{q.dim(0), 3 * Cq});
  return TensorView(q.data, q.dtype, q.device, Shape{a.B, a.T, 3 * Cq});
}

CudnnAttentionDims cudnn_dims(const AttentionArgs& a, int64_t N) {
  return {a.B, a.T, a.spec.heads, a.spec.head_dim, a.row0, a.cu_seqlens, N};
}

// ftune's CUDA kernel ran a pass (packed rows counted apart: their varlen form).
void count_ftune_attention(const AttentionArgs& a) {
  count_gpu_path(GpuPath::AttentionFtune);
  if (a.cu_seqlens) count_gpu_path(GpuPath::AttentionPackedFtune);
}

}  // namespace

AttentionWindow hf_sliding_window(int64_t sliding_window) {
  if (sliding_window < 1)
    throw ShapeError(fmt::format("sliding_window {}: expected >= 1", sliding_window));
  return {sliding_window - 1, -1};
}

AttentionWindow hf_bidirectional_sliding_window(int64_t sliding_window) {
  if (sliding_window < 1)
    throw ShapeError(fmt::format("sliding_window {}: expected >= 1", sliding_window));
  return {sliding_window / 2, sliding_window / 2};
}

AttentionWindow hf_local_attention(int64_t local_attention) {
  if (local_attention < 0)
    throw ShapeError(fmt::format("local_attention {}: expected >= 0", local_attention));
  return {local_attention / 2, local_attention / 2};
}

float default_attention_scale(int64_t head_dim) {
  return 1.0f / std::sqrt(static_cast<float>(head_dim));
}

const char* attention_kernel_name(AttentionKernel kernel) {
  return kernel == AttentionKernel::Cudnn ? "cudnn" : "ftune";
}

int64_t attention_workspace(int64_t T, int64_t /*D*/) {
  return compute_threads() * cpu::attention_workspace_per_thread(T);
}

AttentionBuffers attention_buffers(const AttentionSpec& spec, Device device, bool cudnn,
                                   int64_t sequences, int64_t tokens, int64_t max_seq,
                                   bool backward, int64_t token_positions) {
  AttentionBuffers b;
  const int64_t H = spec.heads, T = max_seq;
  b.saved = cudnn ? cudnn_attention_state_floats(sequences, H, T)
                  : (token_positions > 0 ? token_positions : tokens * T) * H;
  b.workspace = device.is_cpu() ? attention_workspace(T, spec.head_dim)
                                : (backward ? sequences * H * T : 0);
  if (cudnn)
    b.workspace =
        std::max(b.workspace, cudnn_attention_workspace_floats(sequences, H, T, spec.head_dim));
  return b;
}

int64_t attention_workspace(Device device, int64_t B, int64_t H, int64_t T, int64_t D,
                            bool backward) {
  AttentionSpec spec;
  spec.heads = spec.kv_heads = H;
  spec.head_dim = D;
  return attention_buffers(spec, device, false, B, B * T, T, backward).workspace;
}

namespace {

// q, k, v as fp32 for the CPU kernels (16-bit storage staged through fp32 copies in staging
// slots 0-2, ops/cast.h; fp32 read in place), with their row strides set in `a`.
struct StagedQkv {
  const float *q, *k, *v;
};
StagedQkv stage_qkv(AttentionArgs& a, const TensorView& q, const TensorView& k,
                    const TensorView& v) {
  const int64_t N = q.dim(0);
  int64_t ld;
  StagedQkv s{};
  s.q = cpu::stage_f32(q.data, q.dtype, N, q.dim(1), a.ldq, 0, &ld);
  a.ldq = ld;
  s.k = cpu::stage_f32(k.data, k.dtype, N, k.dim(1), a.ldk, 1, &ld);
  a.ldk = ld;
  s.v = cpu::stage_f32(v.data, v.dtype, N, v.dim(1), a.ldv, 2, &ld);
  a.ldv = ld;
  return s;
}

// The CPU kernels on fp32 (16-bit storage staged through fp32 copies, ops/cast.h).
void forward_cpu(AttentionArgs a, const TensorView& out, const TensorView& saved,
                 const TensorView& q, const TensorView& k, const TensorView& v,
                 const TensorView& workspace) {
  const int64_t N = q.dim(0), Cq = q.dim(1);
  const auto [qs, ks, vs] = stage_qkv(a, q, k, v);
  if (out.dtype == DType::F32) {
    cpu::attention_forward(a, out.data_as<float>(), saved.data_as<float>(), qs, ks, vs,
                           workspace.data_as<float>());
    return;
  }
  const int64_t ldo = a.ldo;
  float* o = cpu::staging(3, N * Cq);
  a.ldo = Cq;
  cpu::attention_forward(a, o, saved.data_as<float>(), qs, ks, vs, workspace.data_as<float>());
  cpu::store_f32(out.data, out.dtype, o, N, Cq, ldo);
}

void backward_cpu(AttentionArgs a, const TensorView& dq, const TensorView& dk,
                  const TensorView& dv, const TensorView& dout, const TensorView& q,
                  const TensorView& k, const TensorView& v, const TensorView& saved,
                  const TensorView& workspace) {
  const int64_t N = q.dim(0), Cq = q.dim(1), Ckv = k.dim(1);
  const auto [qs, ks, vs] = stage_qkv(a, q, k, v);
  int64_t ld;
  const float* dos = cpu::stage_f32(dout.data, dout.dtype, N, Cq, a.ldo, 3, &ld);
  a.ldo = ld;
  if (dq.dtype == DType::F32) {
    cpu::attention_backward(a, dq.data_as<float>(), dk.data_as<float>(), dv.data_as<float>(), dos,
                            qs, ks, vs, saved.data_as<float>(), workspace.data_as<float>());
    return;
  }
  const int64_t lddq = a.lddq, lddk = a.lddk, lddv = a.lddv;
  float* gq = cpu::staging(4, N * Cq);
  float* gk = cpu::staging(5, N * Ckv);
  float* gv = cpu::staging(6, N * Ckv);
  a.lddq = Cq;
  a.lddk = Ckv;
  a.lddv = Ckv;
  cpu::attention_backward(a, gq, gk, gv, dos, qs, ks, vs, saved.data_as<float>(),
                          workspace.data_as<float>());
  cpu::store_f32(dq.data, dq.dtype, gq, N, Cq, lddq);
  cpu::store_f32(dk.data, dk.dtype, gk, N, Ckv, lddk);
  cpu::store_f32(dv.data, dv.dtype, gv, N, Ckv, lddv);
}

#ifdef FTUNE_WITH_CUDA
// cuDNN where the run chose it and it takes the call, else ftune's CUDA kernel.
void forward_cuda(const AttentionCall& c, const AttentionArgs& a, bool cudnn,
                  const TensorView& out, const TensorView& saved, const TensorView& q,
                  const TensorView& k, const TensorView& v) {
  if (cudnn) {
    const TensorView qkv = fused_qkv(a, q, k, v, a.ldo, q.dim(1));
    if (try_cudnn_attention_forward(out, saved, qkv, c.rows.key_mask, cudnn_dims(a, q.dim(0)),
                                    c.dropout_p, c.rng, c.workspace))
      return;
    check_ftune_saved("attention_forward", saved, a, q.dim(0));
  }
  count_ftune_attention(a);
  cuda::attention_forward(a, q.dtype, out.data, saved.data_as<float>(), q.data, k.data, v.data);
}

void backward_cuda(const AttentionCall& c, const AttentionArgs& a, bool cudnn,
                   const TensorView& dq, const TensorView& dk, const TensorView& dv,
                   const TensorView& dout, const TensorView& q, const TensorView& k,
                   const TensorView& v, const TensorView& out, const TensorView& saved) {
  if (cudnn) {
    AttentionArgs g = a;  // the gradients must have the same fused layout
    g.ldq = a.lddq;
    g.ldk = a.lddk;
    g.ldv = a.lddv;
    const TensorView dqkv = fused_qkv(g, dq, dk, dv, a.ldo, q.dim(1));
    const TensorView qkv = dqkv.defined() ? fused_qkv(a, q, k, v, a.ldo, q.dim(1)) : TensorView();
    if (try_cudnn_attention_backward(dqkv, dout, qkv, out, saved, c.rows.key_mask,
                                     cudnn_dims(a, q.dim(0)), c.dropout_p, c.rng, c.workspace))
      return;
    check_ftune_saved("attention_backward", saved, a, q.dim(0));
  }
  count_ftune_attention(a);
  cuda::attention_backward(a, q.dtype, dq.data, dk.data, dv.data, dout.data, q.data, k.data,
                           v.data, saved.data_as<float>(), c.workspace.data_as<float>(),
                           c.workspace.numel());
}
#endif

}  // namespace

void attention_forward(const AttentionCall& c, TensorView out, TensorView saved, TensorView q,
                       TensorView k, TensorView v) {
  const char* op = "attention_forward";
  AttentionArgs a = check_call(op, c, q, k, v, saved, false);
  const int64_t N = q.dim(0);
  a.ldo = row_stride_float(op, "out", out, N, c.spec.heads * c.spec.head_dim);
  check_same_dtype(op, q.dtype, {{"out", out}});
  const Device dev = common_device(op, {out, saved, q, k, v, c.rows.cu_seqlens, c.rows.key_mask,
                                        c.workspace});
  // cuDNN (16-bit, a GPU) checks the buffer itself; it may decline and leave it to ftune's kernel.
  const bool cudnn = c.kernel == AttentionKernel::Cudnn && !dev.is_cpu() && q.dtype != DType::F32;
  if (!cudnn) check_ftune_saved(op, saved, a, N);
  FTUNE_DISPATCH(op, dev, forward_cpu(a, out, saved, q, k, v, c.workspace),
                 forward_cuda(c, a, cudnn, out, saved, q, k, v));
}

void attention_backward(const AttentionCall& c, TensorView dq, TensorView dk, TensorView dv,
                        TensorView dout, TensorView q, TensorView k, TensorView v, TensorView out,
                        TensorView saved) {
  const char* op = "attention_backward";
  AttentionArgs a = check_call(op, c, q, k, v, saved, true);
  const int64_t N = q.dim(0), Cq = c.spec.heads * c.spec.head_dim;
  const int64_t Ckv = c.spec.kv_heads * c.spec.head_dim;
  a.ldo = row_stride_float(op, "dout", dout, N, Cq);
  a.lddq = row_stride_float(op, "dq", dq, N, Cq);
  a.lddk = row_stride_float(op, "dk", dk, N, Ckv);
  a.lddv = row_stride_float(op, "dv", dv, N, Ckv);
  check_same_dtype(op, q.dtype, {{"dout", dout}, {"dq", dq}, {"dk", dk}, {"dv", dv}});
  const Device dev = common_device(op, {dq, dk, dv, dout, q, k, v, out, saved,
                                        c.rows.cu_seqlens, c.rows.key_mask, c.workspace});
  const bool cudnn = c.kernel == AttentionKernel::Cudnn && !dev.is_cpu() && q.dtype != DType::F32;
  if (!cudnn) check_ftune_saved(op, saved, a, N);
  FTUNE_DISPATCH(op, dev, backward_cpu(a, dq, dk, dv, dout, q, k, v, saved, c.workspace),
                 backward_cuda(c, a, cudnn, dq, dk, dv, dout, q, k, v, out, saved));
}

// ---- The fused-QKV entry point (BERT-style encoders) -------------------------------------------

namespace {

// The call of the fused entry point, and its qkv as a (B T, 3C) matrix.
AttentionCall fused_call(const char* op, const TensorView& qkv, const TensorView& key_mask,
                         const TensorView& probs, int num_heads, float dropout_p, RngKey rng,
                         const TensorView& workspace, const DropoutRows& rows) {
  if (qkv.rank() != 3 || qkv.dim(2) % 3 != 0)
    throw ShapeError(fmt::format("{}: qkv must be (B, T, 3C), got {}", op, qkv.shape.str()));
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3;
  if (num_heads <= 0 || C % num_heads != 0)
    throw ShapeError(
        fmt::format("{}: hidden size {} is not divisible by {} heads", op, C, num_heads));
  check_float(op, "qkv", qkv, qkv.shape);
  check_shape(op, "key_mask", key_mask, Shape{B, T});
  if (probs.rank() != 1) check_f32(op, "probs", probs, Shape{B, num_heads, T, T});
  const int64_t D = C / num_heads;
  AttentionCall c;
  c.spec = {num_heads, num_heads, D, false, {}, default_attention_scale(D), 0.0f};
  c.rows = {B, T, {}, key_mask};
  c.dropout_p = dropout_p;
  c.rng = rng;
  c.place = rows;
  // A flat buffer is cuDNN's state (ops/attention_cudnn.h): the caller planned for cuDNN.
  c.kernel = probs.rank() == 1 ? AttentionKernel::Cudnn : AttentionKernel::Ftune;
  c.workspace = workspace;
  return c;
}

TensorView as_matrix(const TensorView& t) {
  return t.reshape(Shape{t.dim(0) * t.dim(1), t.dim(2)});
}

}  // namespace

void attention_forward(TensorView out, TensorView probs, TensorView qkv, TensorView key_mask,
                       int num_heads, float dropout_p, RngKey rng, TensorView workspace,
                       const DropoutRows& rows) {
  const char* op = "attention_forward";
  const AttentionCall c =
      fused_call(op, qkv, key_mask, probs, num_heads, dropout_p, rng, workspace, rows);
  const int64_t C = c.spec.heads * c.spec.head_dim;
  check_float(op, "out", out, Shape{c.rows.batch, c.rows.max_seq, C});
  const TensorView m = as_matrix(qkv);
  attention_forward(c, as_matrix(out), probs, columns(m, 0, C), columns(m, C, C),
                    columns(m, 2 * C, C));
}

void attention_backward(TensorView dqkv, TensorView dout, TensorView qkv, TensorView probs,
                        TensorView key_mask, int num_heads, float dropout_p, RngKey rng,
                        TensorView workspace, const DropoutRows& rows, TensorView out) {
  const char* op = "attention_backward";
  const AttentionCall c =
      fused_call(op, qkv, key_mask, probs, num_heads, dropout_p, rng, workspace, rows);
  const int64_t C = c.spec.heads * c.spec.head_dim;
  check_float(op, "dout", dout, Shape{c.rows.batch, c.rows.max_seq, C});
  check_float(op, "dqkv", dqkv, qkv.shape);
  const TensorView m = as_matrix(qkv), dm = as_matrix(dqkv);
  attention_backward(c, columns(dm, 0, C), columns(dm, C, C), columns(dm, 2 * C, C),
                     as_matrix(dout), columns(m, 0, C), columns(m, C, C), columns(m, 2 * C, C),
                     out.defined() ? as_matrix(out) : out, probs);
}

}  // namespace ftune
