// First-token rows: selection, dropout place and the last layer past attention (see
// first_token_rows.h).
#include "models/layers/first_token_rows.h"

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

PastAttentionRows past_attention_rows(bool first_token_layer, const TokenInputs& in,
                                      const DropoutPlan& d) {
  if (first_token_layer) return {in.B, true, first_token_dropout_rows(d, in)};
  return {in.tokens(), false, dropout_rows(d, in)};
}

PastAttentionInputs gather_past_attention(const PastAttentionRows& r, TensorView ctx, TensorView x,
                                          TensorView ctx_rows, TensorView x_rows,
                                          const TokenInputs& in) {
  if (!r.first_tokens) return {ctx, x};
  const int64_t C = ctx.dim(1);
  const PastAttentionInputs out{ctx_rows.prefix({r.count, C}), x_rows.prefix({r.count, C})};
  first_tokens_forward(out.ctx, ctx, in);
  first_tokens_forward(out.x, x, in);
  return out;
}

void scatter_past_attention(TensorView dctx, TensorView dctx_rows, TensorView dx,
                            TensorView dx_rows, const TokenInputs& in) {
  first_tokens_backward(dctx, dctx_rows, in);
  first_tokens_backward(dx, dx_rows, in);
}

}  // namespace ftune
