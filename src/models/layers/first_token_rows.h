// The rows of a model whose head reads only each row's first token ([CLS] / <s>): selecting those
// tokens from a batch's token rows (padded or packed) and back, their place in the dropout
// streams, and the last layer past attention for them alone.
//
// First-token form (BackboneShape::first_token_head; BERT's encoder, models/bert/encoder.h, and
// DeBERTa): nothing reads the last layer's output but the head, so that layer runs its QKV
// projection and attention over every token (the first tokens attend to all of them) and what
// follows attention (the attention output, both LayerNorms, the feed-forward) for the B first
// tokens alone, gathered into (B, C) rows that draw the dropout masks the whole layer draws at
// those tokens; backward scatters their gradients back into (N, C) rows, zero elsewhere, before
// attention's and QKV's backward. The logits and every gradient are the whole layer's: the other
// tokens' last-layer outputs reach no loss.
#pragma once

#include <cstdint>

#include "models/backbone.h"

namespace ftune {

// The first token of every row: hidden (B, T, C) (or its (N, C) view) -> cls (B, C), or token
// cu[b] of a packed batch (hidden (N, C)); backward: dhidden overwritten, zero but at the first
// tokens. A (B, 1, C) hidden is rows of one token whatever the batch's layout: what a model in
// first-token form returns. Any float storage type (ops/first_token.h).
void first_tokens_forward(TensorView cls, TensorView hidden, const TokenInputs& in);
void first_tokens_backward(TensorView dhidden, TensorView dcls, const TokenInputs& in);

// Where the first tokens, gathered into a (B, C) tensor, draw from the dropout streams of `d`
// (ops/dropout.h): the stream elements the same tokens draw in the batch's (N, C) activations,
// padded or packed.
DropoutRows first_token_dropout_rows(const DropoutPlan& d, const TokenInputs& in);

// The rows a layer computes past attention: the batch's N tokens, or (`first_token_layer`: the
// last layer of a model in first-token form) the B first tokens; their dropout streams.
struct PastAttentionRows {
  int64_t count = 0;
  bool first_tokens = false;
  DropoutRows dropout;
};
PastAttentionRows past_attention_rows(bool first_token_layer, const TokenInputs& in,
                                      const DropoutPlan& d);

// The attention output and the layer input as the rows past attention read them: ctx (N, C) and
// x (N, C) themselves, or their first tokens copied into ctx_rows and x_rows ((B, C) buffers).
struct PastAttentionInputs {
  TensorView ctx, x;
};
PastAttentionInputs gather_past_attention(const PastAttentionRows& r, TensorView ctx, TensorView x,
                                          TensorView ctx_rows, TensorView x_rows,
                                          const TokenInputs& in);
// First-token form's backward: the first tokens' gradients of the attention output (dctx_rows)
// and of the layer input through the residual (dx_rows), (B, C) each, written into dctx and dx
// (N, C), zero elsewhere.
void scatter_past_attention(TensorView dctx, TensorView dctx_rows, TensorView dx,
                            TensorView dx_rows, const TokenInputs& in);

}  // namespace ftune
