// Last-token pooling of decoder classifiers, with HF's rule (LlamaForSequenceClassification and
// every *ForSequenceClassification of a decoder): row b is pooled at the last token of the row
// whose id is not the pad id, i.e. argmax over t of (t * (ids[t] != pad)) in transformers, so
//   right padding: the last real token (with pad == eos, the token before a trailing eos);
//   left padding:  the row's last position;
//   a row of pad ids only: its first position (argmax of zeros);
//   pad_id < 0 (no pad token in the config): the row's last position.
// Rows are padded (B rows of T tokens) or packed (row b is tokens [cu[b], cu[b + 1]), the rule
// applied within each row, so a packed batch pools what the padded one does).
//   forward:  index (B) i32 = the pooled token of each row (flat index into the N tokens);
//             out (B, C) = hidden (N, C)[index]
//   backward: dhidden (N, C) = dout[b] at index[b], 0 elsewhere   (overwritten)
// hidden may be (B, T, C) or (N, C); f32.
#pragma once

#include "core/tensor.h"

namespace ftune {

struct LastTokenRows {
  int64_t B = 0, T = 0;   // padded: B rows of T tokens (cu_seqlens undefined)
  TensorView cu_seqlens;  // packed: (B + 1) i32 on the op's device
};

void last_token_forward(TensorView out, TensorView index, TensorView hidden, TensorView ids,
                        const LastTokenRows& rows, int64_t pad_id);
void last_token_backward(TensorView dhidden, TensorView dout, TensorView index);

namespace cpu {
void last_token_index(int32_t* index, const int32_t* ids, const int32_t* cu, int64_t B, int64_t T,
                      int64_t pad_id);
void gather_rows(float* out, const float* hidden, const int32_t* index, int64_t B, int64_t C);
void scatter_rows(float* dhidden, const float* dout, const int32_t* index, int64_t N, int64_t B,
                  int64_t C);
}  // namespace cpu

namespace cuda {
void last_token_index(int32_t* index, const int32_t* ids, const int32_t* cu, int64_t B, int64_t T,
                      int64_t pad_id);
void gather_rows(float* out, const float* hidden, const int32_t* index, int64_t B, int64_t C);
void scatter_rows(float* dhidden, const float* dout, const int32_t* index, int64_t N, int64_t B,
                  int64_t C);
}  // namespace cuda

}  // namespace ftune
