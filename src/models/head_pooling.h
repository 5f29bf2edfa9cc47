// What the families' sequence-classification heads share: the first token of every row (BERT's
// and DeBERTa's pooling, ModernBERT's "cls" pooling) and the dropout streams of a head's input and
// pooled dropouts (BERT's models/bert/classification_head.h and DeBERTa's head draw the same ones).
#pragma once

#include <cstdint>

#include "models/backbone.h"

namespace ftune {

// The first token of every row: hidden (B, T, C) (or its (N, C) view) -> cls (B, C), or token
// cu[b] of a packed batch (hidden (N, C)); backward: dhidden overwritten, zero but at the first
// tokens. A (B, 1, C) hidden is rows of one token whatever the batch's layout: what an encoder
// that computed its last layer for the first tokens alone returns (models/bert/encoder.h).
void first_tokens_forward(TensorView cls, TensorView hidden, const TokenInputs& in);
void first_tokens_backward(TensorView dhidden, TensorView dcls, const TokenInputs& in);

// Where the first tokens, gathered into a (B, C) tensor, draw from the dropout streams of `d`
// (ops/dropout.h): the stream elements the same tokens draw in the batch's (N, C) activations,
// padded or packed, so a layer computed for the first tokens alone drops out what the whole layer
// drops at those tokens.
DropoutRows first_token_dropout_rows(const DropoutPlan& d, const TokenInputs& in);

inline uint32_t head_input_dropout_site() {
  return 0x10000;
}
inline uint32_t head_pooled_dropout_site() {
  return 0x10001;
}

}  // namespace ftune
