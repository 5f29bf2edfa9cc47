// Embedding lookup and its sparse gradient.
//   forward:  out (N, C) = table (V, C)[ids (N)]   (or += with accumulate, so BERT's word,
//             position and token-type embeddings sum into one buffer without extra passes)
//   backward: dtable[ids[n]] += dout[n]            (only the rows that occur are touched)
//             except for ids equal to padding_idx (PyTorch's nn.Embedding(padding_idx=...), which
//             HF uses for word embeddings and RoBERTa's positions): that row gets no gradient.
//             padding_idx < 0 means none.
// ids are i32; an id outside [0, V) is an InputError naming it and the vocabulary size.
// The table of the forward is f32, or bf16 / f16 (a frozen table stored in 16 bits: LoRA with a
// 16-bit base, SequenceClassifier::frozen_16bit): each element is widened exactly to f32, so the
// output is bit for bit the f32 op's on the table's values in f32; out is always f32. A 16-bit
// table has no gradient: the backward takes an f32 dtable only.
//
// The backward is deterministic, in one order of additions on every device and thread count
// (kEmbeddingWindow = 64):
//   the tokens are sorted by id, stably (tokens of one id stay in token order);
//   the sorted sequence is cut into windows of 64 consecutive entries; the entries of one id
//     inside one window are a piece, summed in token order from 0;
//   each id's table row adds its pieces in window order: row += piece_1, row += piece_2, ...
// The CPU sorts (id, token) pairs in its workspace and walks the windows; the CUDA twin sorts with
// CUB's radix sort, sums the pieces with one block per window (all threads of a block on the same
// token, one column each), writes each row whose id lies inside one window, and then, for the ids
// that span windows (the token-type id 0, the positions of a large batch), adds their pieces'
// partial sums in window order, one thread per column. So a table row of N equal ids is no longer
// N serial additions on one block: the work spreads over N / 64 blocks. The two give the same bits.
// workspace: f32 elements, at least embedding_backward_workspace(device, N, C) (the sort's keys
// and scratch, and on CUDA the pieces' partial sums).
#pragma once

#include "core/tensor.h"

namespace ftune {

constexpr int64_t kEmbeddingWindow = 64;

void embedding_forward(TensorView out, TensorView ids, TensorView table, bool accumulate);
void embedding_backward(TensorView dtable, TensorView dout, TensorView ids, int64_t padding_idx,
                        TensorView workspace);
int64_t embedding_backward_workspace(Device device, int64_t N, int64_t C);

// Where the CUDA backward keeps what it needs in its workspace (byte offsets, 256-aligned): the
// sort's keys and values, twice each (CUB's double buffers), the pieces' partial sums of the ids
// that span windows (a head and a tail per window, C floats each), and CUB's own scratch, planned
// as embedding_sort_scratch_bytes(N) (the call checks CUB's answer against it and throws if a CUB
// version ever wants more).
struct EmbeddingCudaLayout {
  int64_t keys0 = 0, keys1 = 0, values0 = 0, values1 = 0, head = 0, tail = 0, sort = 0;
  int64_t sort_bytes = 0, total = 0;
};
EmbeddingCudaLayout embedding_cuda_layout(int64_t N, int64_t C);
int64_t embedding_sort_scratch_bytes(int64_t N);

namespace cpu {
// table of table_dtype (f32, bf16 or f16).
void embedding_forward(float* out, const int32_t* ids, const void* table, DType table_dtype,
                       int64_t N, int64_t C, bool accumulate);
// order: N int64 of workspace.
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C,
                        int64_t padding_idx, int64_t* order);
}  // namespace cpu

namespace cuda {
void embedding_forward(float* out, const int32_t* ids, const void* table, DType table_dtype,
                       int64_t N, int64_t C, bool accumulate);
// V: the table's rows (the sort's key range); workspace laid out as embedding_cuda_layout(N, C).
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C,
                        int64_t V, int64_t padding_idx, void* workspace);
}  // namespace cuda

}  // namespace ftune
