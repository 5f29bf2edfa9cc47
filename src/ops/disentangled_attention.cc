// Disentangled attention: argument checks, the relative-index table, the buffer sizes the planner
// reserves and the one dispatch point (ops/disentangled_attention.h).
#include "ops/disentangled_attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "core/thread_pool.h"
#include "ops/cast.h"
#include "ops/dispatch.h"
#include "ops/disentangled_fused16.h"

namespace ftune {
namespace {

// Relative indices [rlo, rhi) that sequences of T tokens reach (r is non-decreasing in delta).
void reach(const DisentangledSpec& s, int64_t T, int64_t* rlo, int64_t* rhi) {
  *rlo = T > 0 ? deberta_relative_index(s, -(T - 1)) : 0;
  *rhi = T > 0 ? deberta_relative_index(s, T - 1) + 1 : 0;
}

// The index table, rounded up to 4 so what follows stays 16-byte aligned.
int64_t index_floats(int64_t T) { return T > 0 ? (2 * T - 1 + 3) / 4 * 4 : 0; }

// 16-bit storage on CUDA: fp32 copies of the token tensors (forward q, k, v, out; backward q, k,
// v, dout, dq, dk, dv) and of the position tensors (2 forward, 4 backward), at the workspace's
// end. (The CPU reads 16-bit blocks per (sequence, head) in its per-thread workspace instead.)
int64_t staging_floats(const DisentangledSpec& s, int64_t B, int64_t T, bool backward) {
  const int64_t NC = B * T * s.heads * s.head_dim, RC = 2 * s.span() * s.heads * s.head_dim;
  return backward ? 7 * NC + 4 * RC : 4 * NC + 2 * RC;
}

// CUDA with 16-bit storage runs the tensor-core tiles (ops/disentangled_fused16.h) when the head
// size fits them; else the fp32 kernel on staged copies.
bool tiles16(const DisentangledArgs& a, Device device) {
  return !device.is_cpu() && a.storage != DType::F32 &&
         disentangled::fused16_supported(a.spec.head_dim);
}

// The kernels' floats after the index table.
int64_t kernel_floats(const DisentangledArgs& a, Device device, bool backward) {
  if (device.is_cpu()) return compute_threads() * cpu::disentangled_workspace_per_thread(a, backward);
  if (tiles16(a, device))
    return disentangled::fused16_layout(a.spec, a.B, a.T, a.rlo, a.rhi, backward).workspace;
  return disentangled::fused_layout(a.spec, a.B, a.T, a.rlo, a.rhi, backward).workspace;
}

int64_t workspace_floats(const DisentangledArgs& a, Device device, bool backward) {
  const bool staged = !device.is_cpu() && a.storage != DType::F32 && !tiles16(a, device);
  return index_floats(a.T) + kernel_floats(a, device, backward) +
         (staged ? staging_floats(a.spec, a.B, a.T, backward) : 0);
}

int64_t saved_floats(const DisentangledArgs& a, Device device) {
  if (device.is_cpu()) return a.B * a.spec.heads * a.T * a.T;
  return disentangled::fused_layout(a.spec, a.B, a.T, a.rlo, a.rhi, false).saved;
}

void check_spec(const char* op, const DisentangledSpec& s) {
  if (s.heads <= 0 || s.head_dim <= 0)
    throw ShapeError(fmt::format("{}: {} heads of size {}", op, s.heads, s.head_dim));
  if (s.span() <= 0)
    throw ShapeError(fmt::format("{}: position_buckets {} and max_relative_positions {} leave no "
                                 "relative embeddings",
                                 op, s.position_buckets, s.max_relative_positions));
  if (s.position_buckets > 0 && (s.position_buckets < 2 || s.max_relative_positions < 2))
    throw ShapeError(fmt::format("{}: position_buckets {} needs max_relative_positions >= 2 and "
                                 "buckets >= 2, got {}",
                                 op, s.position_buckets, s.max_relative_positions));
}

// A token tensor (N, C) of the call's storage type with contiguous rows: its row stride.
int64_t token_ld(const char* op, const char* arg, const TensorView& v, int64_t N, int64_t C,
                 DType storage) {
  check_dtype(op, arg, v, storage);
  return row_stride_float(op, arg, v, N, C);
}

// A position tensor (2S, C), fp32 or of the storage type, with contiguous rows: its row stride (0
// for an optional view its term does not use).
int64_t ld_of(const char* op, const char* arg, const TensorView& v, int64_t rows, int64_t cols,
              bool needed, DType storage) {
  if (!needed) return 0;
  if (!v.defined()) throw ShapeError(fmt::format("{}: {} is required by pos_att_type", op, arg));
  if (v.dtype != DType::F32) check_dtype(op, arg, v, storage);
  return row_stride_float(op, arg, v, rows, cols);
}

// 16-bit storage on CUDA (ops/cast.h's emulation): the fp32 kernels run on exact fp32
// copies in the workspace's staging area, and each output is rounded back once at the end.
// fp32 tensors are used in place.
class Staging {
 public:
  Staging(Device dev, float* at) : dev_(dev), at_(at) {}
  // t as fp32 (rows, cols); *ld: the row stride to read it with.
  const float* in(const TensorView& t, int64_t rows, int64_t cols, int64_t* ld) {
    if (!t.defined() || t.dtype == DType::F32) return t.defined() ? t.data_as<float>() : nullptr;
    TensorView f = take(rows, cols, ld);
    cast(f, t);
    return f.data_as<float>();
  }
  // Where the kernels write output t; finish() rounds it into t.
  float* out(const TensorView& t, int64_t rows, int64_t cols, int64_t* ld) {
    if (!t.defined() || t.dtype == DType::F32) return t.defined() ? t.data_as<float>() : nullptr;
    TensorView f = take(rows, cols, ld);
    pending_[n_pending_++] = {t, f};
    return f.data_as<float>();
  }
  void finish() {
    for (int i = 0; i < n_pending_; ++i) cast(pending_[i].first, pending_[i].second);
  }

 private:
  TensorView take(int64_t rows, int64_t cols, int64_t* ld) {
    TensorView f(at_, DType::F32, dev_, Shape{rows, cols});
    at_ += rows * cols;
    *ld = cols;
    return f;
  }
  Device dev_;
  float* at_;
  std::array<std::pair<TensorView, TensorView>, 5> pending_;
  int n_pending_ = 0;
};

DisentangledArgs check_call(const char* op, Device dev, const DisentangledCall& c,
                            const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& pk, const TensorView& pq, const TensorView& saved,
                            bool backward) {
  check_spec(op, c.spec);
  using disentangled::FusedKind;
  const int64_t D = c.spec.head_dim;
  const bool on16 = q.dtype != DType::F32 && disentangled::fused16_supported(D);
  if (!dev.is_cpu() && !on16 && (disentangled::fused_tile(FusedKind::Forward, D) == 0 ||
                        disentangled::fused_tile(FusedKind::Dq, D) == 0 ||
                        disentangled::fused_tile(FusedKind::Dkv, D) == 0))
    throw ShapeError(fmt::format("{}: head size {} is too large for the CUDA kernel's shared "
                                 "memory (at most 480)",
                                 op, c.spec.head_dim));
  DisentangledArgs a;
  a.spec = c.spec;
  a.scale = c.spec.scale();
  a.B = c.batch;
  a.T = c.seq;
  if (a.B < 0 || a.T < 0) throw ShapeError(fmt::format("{}: batch {} and seq {}", op, a.B, a.T));
  const int64_t N = a.B * a.T, C = c.spec.heads * c.spec.head_dim, R = 2 * c.spec.span();
  const DType st = q.dtype;
  if (!is_float_type(st))
    throw ShapeError(fmt::format("{}: q has dtype {}, expected f32, bf16 or f16", op,
                                 dtype_name(st)));
  a.storage = st;
  a.pk_type = c.spec.c2p ? pk.dtype : st;
  a.pq_type = c.spec.p2c ? pq.dtype : st;
  a.ldq = token_ld(op, "q", q, N, C, st);
  a.ldk = token_ld(op, "k", k, N, C, st);
  a.ldv = token_ld(op, "v", v, N, C, st);
  a.ldpk = ld_of(op, "pos_key", pk, R, C, c.spec.c2p, st);
  a.ldpq = ld_of(op, "pos_query", pq, R, C, c.spec.p2c, st);
  if (c.key_mask.defined()) {
    if (c.key_mask.numel() != N)
      throw ShapeError(fmt::format("{}: key_mask has {} elements for {} tokens", op,
                                   c.key_mask.numel(), N));
    check_dtype(op, "key_mask", c.key_mask, DType::I32);
    check_contiguous(op, "key_mask", c.key_mask);
    a.key_mask = c.key_mask.data_as<int32_t>();
  }
  if (!(c.dropout_p >= 0.0f && c.dropout_p < 1.0f))
    throw ShapeError(fmt::format("{}: dropout p = {} outside [0, 1)", op, c.dropout_p));
  a.dropout_p = c.dropout_p;
  a.rng = c.rng;
  a.row0 = c.place.row0;
  a.Tv = c.place.stream_seq > 0 ? c.place.stream_seq : a.T;
  if (a.Tv < a.T)
    throw ShapeError(
        fmt::format("{}: sequence length {} exceeds the dropout stream's {}", op, a.T, a.Tv));
  reach(c.spec, a.T, &a.rlo, &a.rhi);
  check_dtype(op, "saved", saved, DType::F32);
  check_contiguous(op, "saved", saved);
  if (saved.numel() < saved_floats(a, dev))
    throw ShapeError(fmt::format("{}: saved holds {} floats, B={} H={} T={} needs {}", op,
                                 saved.numel(), a.B, c.spec.heads, a.T, saved_floats(a, dev)));
  check_dtype(op, "workspace", c.workspace, DType::F32);
  check_contiguous(op, "workspace", c.workspace);
  const int64_t need = workspace_floats(a, dev, backward);
  if (c.workspace.numel() < need)
    throw ShapeError(
        fmt::format("{}: workspace of {} floats, needs {}", op, c.workspace.numel(), need));
  a.rel_index = reinterpret_cast<const int32_t*>(c.workspace.data_as<float>());
  return a;
}

// The relative-index table at the workspace's start, on the op's device.
void write_index(const DisentangledArgs& a, Device device) {
  int32_t* index = const_cast<int32_t*>(a.rel_index);
  if (device.is_cpu()) {
    for (int64_t d = 0; d < index_floats(a.T); ++d)
      index[d] = static_cast<int32_t>(deberta_relative_index(a.spec, d - (a.T - 1)));
    return;
  }
  FTUNE_CUDA_BRANCH("disentangled_attention", cuda::disentangled_relative_index(a, index));
}

float* after_index(const DisentangledCall& c) {
  return c.workspace.data_as<float>() + index_floats(c.seq);
}

Staging staging_of(const DisentangledCall& c, const DisentangledArgs& a, Device dev,
                   bool backward) {
  return Staging(dev, after_index(c) + kernel_floats(a, dev, backward));
}

}  // namespace

float DisentangledSpec::scale() const {
  const int factor = 1 + (c2p ? 1 : 0) + (p2c ? 1 : 0);
  return 1.0f / std::sqrt(static_cast<float>(head_dim) * static_cast<float>(factor));
}

DisentangledBuffers disentangled_attention_buffers(const DisentangledSpec& spec, Device device,
                                                   int64_t batch, int64_t seq, bool backward,
                                                   DType storage) {
  DisentangledArgs a;
  a.spec = spec;
  a.B = batch;
  a.T = seq;
  a.storage = a.pk_type = a.pq_type = a.dpk_type = a.dpq_type = storage;
  reach(spec, seq, &a.rlo, &a.rhi);
  return {saved_floats(a, device), workspace_floats(a, device, backward)};
}

void disentangled_attention_forward(const DisentangledCall& c, TensorView out, TensorView saved,
                                    TensorView q, TensorView k, TensorView v, TensorView pos_key,
                                    TensorView pos_query) {
  const char* op = "disentangled_attention_forward";
  const Device dev = common_device(op, {out, saved, q, k, v, pos_key, pos_query, c.key_mask,
                                        c.workspace});
  DisentangledArgs a = check_call(op, dev, c, q, k, v, pos_key, pos_query, saved, false);
  const int64_t N = a.B * a.T, C = c.spec.heads * c.spec.head_dim, R = 2 * c.spec.span();
  a.ldo = token_ld(op, "out", out, N, C, q.dtype);
  if (N == 0) return;
  write_index(a, dev);
  float* sv = saved.data_as<float>();
  const void* pk = c.spec.c2p ? pos_key.data : nullptr;
  const void* pq = c.spec.p2c ? pos_query.data : nullptr;
  [[maybe_unused]] auto on_cuda = [&] {
    if (tiles16(a, dev))
      return cuda::disentangled_attention_forward16(a, out.data, sv, q.data, k.data, v.data, pk,
                                                    pq, after_index(c));
    Staging st = staging_of(c, a, dev, false);
    const float *qf = st.in(q, N, C, &a.ldq), *kf = st.in(k, N, C, &a.ldk),
                *vf = st.in(v, N, C, &a.ldv);
    const float* pkf = st.in(c.spec.c2p ? pos_key : TensorView(), R, C, &a.ldpk);
    const float* pqf = st.in(c.spec.p2c ? pos_query : TensorView(), R, C, &a.ldpq);
    float* of = st.out(out, N, C, &a.ldo);
    cuda::disentangled_attention_forward(a, of, sv, qf, kf, vf, pkf, pqf, after_index(c));
    st.finish();
  };
  FTUNE_DISPATCH(op, dev,
                 cpu::disentangled_attention_forward(a, out.data, sv, q.data, k.data, v.data, pk,
                                                     pq, after_index(c)),
                 on_cuda());
}

void disentangled_attention_backward(const DisentangledCall& c, TensorView dq, TensorView dk,
                                     TensorView dv, TensorView dpos_key, TensorView dpos_query,
                                     TensorView dout, TensorView q, TensorView k, TensorView v,
                                     TensorView pos_key, TensorView pos_query, TensorView saved) {
  const char* op = "disentangled_attention_backward";
  const Device dev = common_device(op, {dq, dk, dv, dpos_key, dpos_query, dout, q, k, v, pos_key,
                                        pos_query, saved, c.key_mask, c.workspace});
  DisentangledArgs a = check_call(op, dev, c, q, k, v, pos_key, pos_query, saved, true);
  const int64_t N = a.B * a.T, C = c.spec.heads * c.spec.head_dim, R = 2 * c.spec.span();
  const DType t = q.dtype;
  a.ldo = token_ld(op, "dout", dout, N, C, t);
  a.lddq = token_ld(op, "dq", dq, N, C, t);
  a.lddk = token_ld(op, "dk", dk, N, C, t);
  a.lddv = token_ld(op, "dv", dv, N, C, t);
  a.lddpk = ld_of(op, "dpos_key", dpos_key, R, C, c.spec.c2p, t);
  a.lddpq = ld_of(op, "dpos_query", dpos_query, R, C, c.spec.p2c, t);
  a.dpk_type = c.spec.c2p ? dpos_key.dtype : t;
  a.dpq_type = c.spec.p2c ? dpos_query.dtype : t;
  if (N == 0) return;
  write_index(a, dev);
  const float* sv = saved.data_as<float>();
  [[maybe_unused]] auto on_cuda = [&] {
    if (tiles16(a, dev))
      return cuda::disentangled_attention_backward16(
          a, dq.data, dk.data, dv.data, c.spec.c2p ? dpos_key.data : nullptr,
          c.spec.p2c ? dpos_query.data : nullptr, dout.data, q.data, k.data, v.data,
          c.spec.c2p ? pos_key.data : nullptr, c.spec.p2c ? pos_query.data : nullptr, sv,
          after_index(c));
    Staging st = staging_of(c, a, dev, true);
    const float *qf = st.in(q, N, C, &a.ldq), *kf = st.in(k, N, C, &a.ldk),
                *vf = st.in(v, N, C, &a.ldv), *dof = st.in(dout, N, C, &a.ldo);
    const float* pk = st.in(c.spec.c2p ? pos_key : TensorView(), R, C, &a.ldpk);
    const float* pq = st.in(c.spec.p2c ? pos_query : TensorView(), R, C, &a.ldpq);
    float *dqf = st.out(dq, N, C, &a.lddq), *dkf = st.out(dk, N, C, &a.lddk),
          *dvf = st.out(dv, N, C, &a.lddv);
    float* dpk = st.out(c.spec.c2p ? dpos_key : TensorView(), R, C, &a.lddpk);
    float* dpq = st.out(c.spec.p2c ? dpos_query : TensorView(), R, C, &a.lddpq);
    cuda::disentangled_attention_backward(a, dqf, dkf, dvf, dpk, dpq, dof, qf, kf, vf, pk, pq, sv,
                                          after_index(c));
    st.finish();
  };
  FTUNE_DISPATCH(op, dev,
                 cpu::disentangled_attention_backward(
                     a, dq.data, dk.data, dv.data, c.spec.c2p ? dpos_key.data : nullptr,
                     c.spec.p2c ? dpos_query.data : nullptr, dout.data, q.data, k.data, v.data,
                     c.spec.c2p ? pos_key.data : nullptr, c.spec.p2c ? pos_query.data : nullptr,
                     sv, after_index(c)),
                 on_cuda());
}

}  // namespace ftune
