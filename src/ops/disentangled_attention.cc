// Disentangled attention: argument checks, the relative-index table, the buffer sizes the planner
// reserves and the one dispatch point (ops/disentangled_attention.h).
#include "ops/disentangled_attention.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "ops/dispatch.h"
#include "ops/disentangled_tiles.h"

namespace ftune {
namespace {

// Relative indices [rlo, rhi) that sequences of T tokens reach (r is non-decreasing in delta).
void reach(const DisentangledSpec& s, int64_t T, int64_t* rlo, int64_t* rhi) {
  *rlo = T > 0 ? deberta_relative_index(s, -(T - 1)) : 0;
  *rhi = T > 0 ? deberta_relative_index(s, T - 1) + 1 : 0;
}

// The index table, rounded up to 4 so what follows stays 16-byte aligned.
int64_t index_floats(int64_t T) { return T > 0 ? (2 * T - 1 + 3) / 4 * 4 : 0; }

int64_t workspace_floats(const DisentangledArgs& a, Device device, bool backward) {
  if (device.is_cpu())
    return index_floats(a.T) + compute_threads() * cpu::disentangled_workspace_per_thread(a);
  return index_floats(a.T) +
         disentangled::fused_layout(a.spec, a.B, a.T, a.rlo, a.rhi, backward).workspace;
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

// A (rows, C) view with contiguous rows: its row stride (0 for an undefined optional view).
int64_t ld_of(const char* op, const char* arg, const TensorView& v, int64_t rows, int64_t cols,
              bool needed) {
  if (!needed) return 0;
  if (!v.defined()) throw ShapeError(fmt::format("{}: {} is required by pos_att_type", op, arg));
  check_dtype(op, arg, v, DType::F32);
  return row_stride(op, arg, v, rows, cols);
}

DisentangledArgs check_call(const char* op, Device dev, const DisentangledCall& c,
                            const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& pk, const TensorView& pq, const TensorView& saved,
                            bool backward) {
  check_spec(op, c.spec);
  if (!dev.is_cpu() && (disentangled::fused_tile(disentangled::FusedKind::Forward, c.spec.head_dim) == 0 ||
                        disentangled::fused_tile(disentangled::FusedKind::Dkv, c.spec.head_dim) == 0))
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
  for (const auto& [name, view] : {std::pair<const char*, TensorView>{"q", q}, {"k", k}, {"v", v}})
    check_dtype(op, name, view, DType::F32);
  a.ldq = row_stride(op, "q", q, N, C);
  a.ldk = row_stride(op, "k", k, N, C);
  a.ldv = row_stride(op, "v", v, N, C);
  a.ldpk = ld_of(op, "pos_key", pk, R, C, c.spec.c2p);
  a.ldpq = ld_of(op, "pos_query", pq, R, C, c.spec.p2c);
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

}  // namespace

float DisentangledSpec::scale() const {
  const int factor = 1 + (c2p ? 1 : 0) + (p2c ? 1 : 0);
  return 1.0f / std::sqrt(static_cast<float>(head_dim) * static_cast<float>(factor));
}

DisentangledBuffers disentangled_attention_buffers(const DisentangledSpec& spec, Device device,
                                                   int64_t batch, int64_t seq, bool backward) {
  DisentangledArgs a;
  a.spec = spec;
  a.B = batch;
  a.T = seq;
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
  check_dtype(op, "out", out, DType::F32);
  a.ldo = row_stride(op, "out", out, a.B * a.T, c.spec.heads * c.spec.head_dim);
  if (a.B * a.T == 0) return;
  write_index(a, dev);
  const float* pk = pos_key.defined() ? pos_key.data_as<float>() : nullptr;
  const float* pq = pos_query.defined() ? pos_query.data_as<float>() : nullptr;
  FTUNE_DISPATCH(op, dev,
                 cpu::disentangled_attention_forward(a, out.data_as<float>(),
                                                     saved.data_as<float>(), q.data_as<float>(),
                                                     k.data_as<float>(), v.data_as<float>(), pk,
                                                     pq, after_index(c)),
                 cuda::disentangled_attention_forward(a, out.data_as<float>(),
                                                      saved.data_as<float>(), q.data_as<float>(),
                                                      k.data_as<float>(), v.data_as<float>(), pk,
                                                      pq, after_index(c)));
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
  for (const auto& [name, view] :
       {std::pair<const char*, TensorView>{"dq", dq}, {"dk", dk}, {"dv", dv}, {"dout", dout}})
    check_dtype(op, name, view, DType::F32);
  a.ldo = row_stride(op, "dout", dout, N, C);
  a.lddq = row_stride(op, "dq", dq, N, C);
  a.lddk = row_stride(op, "dk", dk, N, C);
  a.lddv = row_stride(op, "dv", dv, N, C);
  a.lddpk = ld_of(op, "dpos_key", dpos_key, R, C, c.spec.c2p);
  a.lddpq = ld_of(op, "dpos_query", dpos_query, R, C, c.spec.p2c);
  if (N == 0) return;
  write_index(a, dev);
  auto f = [](const TensorView& t) { return t.defined() ? t.data_as<float>() : nullptr; };
  FTUNE_DISPATCH(op, dev,
                 cpu::disentangled_attention_backward(
                     a, dq.data_as<float>(), dk.data_as<float>(), dv.data_as<float>(),
                     f(dpos_key), f(dpos_query), dout.data_as<float>(), q.data_as<float>(),
                     k.data_as<float>(), v.data_as<float>(), f(pos_key), f(pos_query),
                     saved.data_as<float>(), after_index(c)),
                 cuda::disentangled_attention_backward(
                     a, dq.data_as<float>(), dk.data_as<float>(), dv.data_as<float>(),
                     f(dpos_key), f(dpos_query), dout.data_as<float>(), q.data_as<float>(),
                     k.data_as<float>(), v.data_as<float>(), f(pos_key), f(pos_query),
                     saved.data_as<float>(), after_index(c)));
}

}  // namespace ftune
