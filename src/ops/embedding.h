// Embedding lookup and its sparse gradient.
//   forward:  out (N, C) = table (V, C)[ids (N)]   (or += with accumulate, so BERT's word,
//             position and token-type embeddings sum into one buffer without extra passes)
//   backward: dtable[ids[n]] += dout[n]            (only the rows that occur are touched)
//             except for ids equal to padding_idx (PyTorch's nn.Embedding(padding_idx=...), which
//             HF uses for word embeddings and RoBERTa's positions): that row gets no gradient.
//             padding_idx < 0 means none.
// ids are i32; an id outside [0, V) is an InputError naming it and the vocabulary size.
// The backward is deterministic: each thread owns a slice of the C columns and walks the tokens
// in order, so repeated ids accumulate in the same order whatever the thread count. The CUDA twin
// adds in that same token order (no atomics), so both devices give the same bits.
#pragma once

#include "core/tensor.h"

namespace ftune {

void embedding_forward(TensorView out, TensorView ids, TensorView table, bool accumulate);
void embedding_backward(TensorView dtable, TensorView dout, TensorView ids,
                        int64_t padding_idx = -1);

namespace cpu {
void embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int64_t C,
                       bool accumulate);
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C,
                        int64_t padding_idx);
}  // namespace cpu

namespace cuda {
void embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int64_t C,
                       bool accumulate);
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C,
                        int64_t padding_idx);
}  // namespace cuda

}  // namespace ftune
