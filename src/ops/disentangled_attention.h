// DeBERTa-v2/v3's disentangled self-attention core (HF DisentangledSelfAttention), between the
// Q/K/V projections and the output projection, over padded rows of T tokens with a key mask.
// For one sequence and head h (q_i, k_j, v_j the head's rows, pk_r / pq_r the head's rows of the
// projected relative embeddings, r = 0 .. 2S - 1):
//
//   delta(i, j) = i - j;  bucket(delta) = HF's make_log_bucket_position when position_buckets > 0
//                 (delta itself inside (-mid, mid), mid = buckets / 2; past it
//                  sign * (ceil(log(|delta| / mid) / log((max_rel - 1) / mid) * (mid - 1)) + mid),
//                  computed in fp32 as torch computes it), else delta
//   r(i, j)     = clamp(bucket(delta) + S, 0, 2S - 1),   S = position_buckets > 0 ? buckets
//                                                            : max_relative_positions
//   s_ij        = c (q_i . k_j + [c2p] q_i . pk_r(i,j) + [p2c] k_j . pq_r(i,j))
//   c           = 1 / sqrt(D (1 + [c2p] + [p2c]))
//   P_i         = softmax_j over the real keys (key_mask[j] != 0) when query i is real; a padding
//                 query (key_mask[i] == 0) attends uniformly to all T keys and passes no gradient
//                 to its scores (HF's masked_fill of the pairwise mask m_i m_j)
//   out_i       = sum_j dropout(P)_ij v_j
// (p2c's index is HF's clamp(-bucket(j - i) + S): bucket is odd, so it is r(i, j) above.)
//
// The relative embeddings' projections (share_att_key: query_proj / key_proj of the normalised
// rel_embeddings; else pos_query_proj / pos_key_proj) are the caller's linear layers: the op takes
// pos_key (2S, H D) for c2p and pos_query (2S, H D) for p2c and returns their gradients.
//
// Layouts (N = B T tokens, C = H D): q, k, v, out, dout, dq, dk, dv (N, C), any row stride with
// contiguous rows (column views of a fused projection need no copy); pos_key, pos_query and their
// gradients (2S, C), same rule. saved (f32, what backward needs of forward; its size depends on
// the device, disentangled_attention_buffers): on the CPU the probabilities P before dropout,
// (B, H, T, T); on CUDA the softmax statistics lse (B, H, T) and O in fp32 (N, C).
// Gradients: dq, dk, dv, dpos_key, dpos_query are overwritten (activation gradients); the
// relative embeddings' gradient sums over sequences in a fixed order (deterministic).
//
// Dropout on the probabilities, keyed exactly as ops/attention.h's: element (b, h, i, j) is kept
// when Philox(rng, (((row0 + b) H + h) Tv + i) Tv + j) >= p (Tv = place.stream_seq or T).
//
// Storage: q, k, v, out, dout, dq, dk, dv share one type, f32, bf16 or f16; the position tensors
// and their gradients are f32 or that type. Each output is rounded once.
//
// Kernels. CPU (ops/disentangled_attention_cpu.cc), fp32 arithmetic: per (sequence, head) BLAS
// GEMMs over the whole (T, T) scores, C2P = Q PK^T and P2C = K PQ^T only over the relative indices
// the sequence reaches; 16-bit tensors are read one (sequence, head) block at a time into the
// per-thread workspace (exact), so 16-bit storage gives the fp32 results rounded once.
// CUDA, flash-attention style (tiles of queries x keys gather the position terms from the per-row
// products C2P and P2C, GEMMs over the relative indices in reach; an online softmax keeps only lse
// for backward, which recomputes P tile by tile; nothing (B, H, T, T) is stored): fp32 storage runs
// ops/disentangled_fused.h + ops/disentangled_tiles.h in fp32 (head sizes up to 480, a ShapeError
// beyond); 16-bit storage runs ops/disentangled_fused16.h + ops/disentangled_tiles16.h, reading
// 16-bit q, k, v, dO directly and running the tile products on tensor cores (fp32 accumulation;
// P and dS rounded to the storage type for their products, as flash attention does; softmax,
// statistics, masks, dropout and the gathers in fp32), the position GEMMs on 16-bit inputs with
// fp32 outputs. A 16-bit head size whose tiles do not fit shared memory (past 368) runs the
// fp32 kernels on fp32 copies staged in the workspace instead.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "ops/dropout.h"

namespace ftune {

// What a DeBERTa config decides about its attention.
struct DisentangledSpec {
  int64_t heads = 0;
  int64_t head_dim = 0;
  bool c2p = false, p2c = false;  // pos_att_type
  int64_t position_buckets = 0;   // <= 0: no log buckets
  int64_t max_relative_positions = 0;  // resolved: max_position_embeddings when the config's < 1

  // S: the relative embeddings hold 2S rows.
  FTUNE_HD int64_t span() const {
    return position_buckets > 0 ? position_buckets : max_relative_positions;
  }
  // 1 / sqrt(D (1 + number of position terms)), as HF's scaled_size_sqrt in fp32.
  float scale() const;
};

// HF's make_log_bucket_position of one relative distance (bucket_size > 0, max_position > 0), in
// fp32 as torch computes it (host and device share it).
FTUNE_HD int64_t deberta_log_bucket(int64_t delta, int64_t bucket_size,
                                           int64_t max_position) {
  const int64_t mid = bucket_size / 2;
  const int64_t abs_pos = delta < 0 ? -delta : delta;
  if (abs_pos <= mid) return delta;
  const float ratio = static_cast<float>(static_cast<double>(max_position - 1) / mid);
  const float log_pos =
      ceilf(logf(static_cast<float>(abs_pos) / static_cast<float>(mid)) / logf(ratio) *
            static_cast<float>(mid - 1)) +
      static_cast<float>(mid);
  return delta < 0 ? -static_cast<int64_t>(log_pos) : static_cast<int64_t>(log_pos);
}

// r(i, j) of delta = i - j: the row of the relative embeddings the pair reads (see above).
FTUNE_HD int64_t deberta_relative_index(const DisentangledSpec& spec, int64_t delta) {
  const int64_t S = spec.span();
  const int64_t bucket = spec.position_buckets > 0 && spec.max_relative_positions > 0
                             ? deberta_log_bucket(delta, spec.position_buckets,
                                                  spec.max_relative_positions)
                             : delta;
  const int64_t r = bucket + S;
  return r < 0 ? 0 : r > 2 * S - 1 ? 2 * S - 1 : r;
}

// One call: everything but the tensors.
struct DisentangledCall {
  DisentangledSpec spec;
  int64_t batch = 0, seq = 0;  // B rows of T tokens
  TensorView key_mask;         // (N) i32: 1 real, 0 padding; undefined: every token real
  float dropout_p = 0;
  RngKey rng;
  DropoutRows place;  // row0 and stream_seq (Tv) of the dropout streams
  TensorView workspace;  // f32, disentangled_attention_buffers().workspace floats
};

// What the planner reserves, in floats: saved per call site (see saved above), workspace shared
// scratch on the op's device: the relative indices (2T - 1 i32, rounded up to 4) at its start,
// then on the CPU per-thread scores and gathers (and, 16-bit, the unit's fp32 blocks), on CUDA the
// position products and, backward, their gradients (disentangled::FusedLayout: 2 or 4 x
// (H, B T, W) with W <= 2S, and B H T; 16-bit: disentangled::Fused16Layout).
struct DisentangledBuffers {
  int64_t saved = 0, workspace = 0;
};
// storage: the type of q, k, v (and of the position tensors, as the models pass them).
DisentangledBuffers disentangled_attention_buffers(const DisentangledSpec& spec, Device device,
                                                   int64_t batch, int64_t seq, bool backward,
                                                   DType storage = DType::F32);

// out (N, C); pos_key / pos_query may be undefined when their term is off.
void disentangled_attention_forward(const DisentangledCall& call, TensorView out, TensorView saved,
                                    TensorView q, TensorView k, TensorView v, TensorView pos_key,
                                    TensorView pos_query);
void disentangled_attention_backward(const DisentangledCall& call, TensorView dq, TensorView dk,
                                     TensorView dv, TensorView dpos_key, TensorView dpos_query,
                                     TensorView dout, TensorView q, TensorView k, TensorView v,
                                     TensorView pos_key, TensorView pos_query, TensorView saved);

// The resolved call as the kernels see it (host pointers on the CPU, device pointers on CUDA).
struct DisentangledArgs {
  DisentangledSpec spec;
  float scale = 0;
  int64_t B = 0, T = 0;
  const int32_t* key_mask = nullptr;
  const int32_t* rel_index = nullptr;  // (2T - 1): r of delta = d - (T - 1); in the workspace
  int64_t rlo = 0, rhi = 0;            // the relative indices [rlo, rhi) the call reaches
  int64_t ldq = 0, ldk = 0, ldv = 0, ldo = 0, ldpk = 0, ldpq = 0;
  int64_t lddq = 0, lddk = 0, lddv = 0, lddpk = 0, lddpq = 0;
  float dropout_p = 0;
  RngKey rng;
  uint64_t row0 = 0;
  int64_t Tv = 0;
  // Storage types: q, k, v, out, dout, dq, dk, dv; the position tensors and their gradients.
  DType storage = DType::F32;
  DType pk_type = DType::F32, pq_type = DType::F32, dpk_type = DType::F32,
        dpq_type = DType::F32;

  FTUNE_HD int64_t rel(int64_t i, int64_t j) const { return rel_index[i - j + T - 1]; }
  FTUNE_HD bool real(int64_t b, int64_t t) const {
    return key_mask == nullptr || key_mask[b * T + t] != 0;
  }
  FTUNE_HD uint64_t stream_row(uint64_t row0_resolved, int64_t b, int64_t h, int64_t i) const {
    const uint64_t tv = static_cast<uint64_t>(Tv);
    return (((row0_resolved + static_cast<uint64_t>(b)) * static_cast<uint64_t>(spec.heads) +
             static_cast<uint64_t>(h)) * tv + static_cast<uint64_t>(i)) * tv;
  }
};

namespace cpu {
// Floats per thread: the scores and gathers, and for 16-bit storage the fp32 blocks of one
// (sequence, head) (see ops/disentangled_attention_cpu.cc).
int64_t disentangled_workspace_per_thread(const DisentangledArgs& a, bool backward);
// Tensors of the types in a (storage, pk_type, ...); probs is fp32.
void disentangled_attention_forward(const DisentangledArgs& a, void* out, float* probs,
                                    const void* q, const void* k, const void* v, const void* pk,
                                    const void* pq, float* workspace);
void disentangled_attention_backward(const DisentangledArgs& a, void* dq, void* dk, void* dv,
                                     void* dpk, void* dpq, const void* dout, const void* q,
                                     const void* k, const void* v, const void* pk,
                                     const void* pq, const float* probs, float* workspace);
}  // namespace cpu

namespace cuda {
// Writes the (2T - 1) relative indices at a.rel_index (device memory, the workspace's start).
void disentangled_relative_index(const DisentangledArgs& a, int32_t* rel_index);
// saved: lse and O (disentangled::FusedLayout); workspace: after the index table.
void disentangled_attention_forward(const DisentangledArgs& a, float* out, float* saved,
                                    const float* q, const float* k, const float* v,
                                    const float* pk, const float* pq, float* workspace);
void disentangled_attention_backward(const DisentangledArgs& a, float* dq, float* dk, float* dv,
                                     float* dpk, float* dpq, const float* dout, const float* q,
                                     const float* k, const float* v, const float* pk,
                                     const float* pq, const float* saved, float* workspace);
// 16-bit storage (a.storage bf16 or f16) on the tensor-core tiles: q, k, v, out, dout, dq, dk, dv
// of that type, the position tensors and their gradients of a.pk_type ... (f32 or that type);
// workspace: disentangled::Fused16Layout after the index table.
void disentangled_attention_forward16(const DisentangledArgs& a, void* out, float* saved,
                                      const void* q, const void* k, const void* v, const void* pk,
                                      const void* pq, float* workspace);
void disentangled_attention_backward16(const DisentangledArgs& a, void* dq, void* dk, void* dv,
                                       void* dpk, void* dpq, const void* dout, const void* q,
                                       const void* k, const void* v, const void* pk,
                                       const void* pq, const float* saved, float* workspace);
}  // namespace cuda

}  // namespace ftune
