// First-token pooling of the families' heads (see head_pooling.h).
#include "models/head_pooling.h"

#include <algorithm>

#include "ops/first_token.h"

namespace ftune {
namespace {

// A padded batch's (N, C) token rows as (B, T, C); a rank-3 view as it is.
TensorView padded_rows(const TensorView& t, const TokenInputs& in) {
  return t.rank() == 3 ? t : t.reshape({in.B, in.T, t.dim(1)});
}

}  // namespace

// Read on the device for a packed batch (ops/first_token.h).
void first_tokens_forward(TensorView cls, TensorView hidden, const TokenInputs& in) {
  if (in.packed() && hidden.rank() == 2)
    first_token_forward(cls, hidden, in.cu_seqlens);
  else
    first_token_forward(cls, padded_rows(hidden, in));
}

void first_tokens_backward(TensorView dhidden, TensorView dcls, const TokenInputs& in) {
  if (in.packed() && dhidden.rank() == 2)
    first_token_backward(dhidden, dcls, in.cu_seqlens);
  else
    first_token_backward(padded_rows(dhidden, in), dcls);
}

// Token t of row b draws ((row0 + b) * Tv + t) * C + c (ops/dropout.h), with Tv as
// dropout_rows(d, in) gives it; the first tokens are t = 0, so (B, C) rows of one position in a
// stream of Tv positions per row.
DropoutRows first_token_dropout_rows(const DropoutPlan& d, const TokenInputs& in) {
  const int64_t tv = in.packed() ? std::max(d.stream_seq, in.max_len)
                                 : (d.stream_seq > 0 ? d.stream_seq : in.T);
  return DropoutRows{d.row0, 1, tv};
}

}  // namespace ftune
