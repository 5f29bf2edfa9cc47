// What the families' sequence-classification heads share: the first token of every row (BERT's
// and DeBERTa's pooling, ModernBERT's "cls" pooling) and the dropout streams of a head's input and
// pooled dropouts (BERT's models/bert/classification_head.h and DeBERTa's head draw the same ones).
#pragma once

#include <cstdint>

#include "models/backbone.h"

namespace ftune {

// The first token of every row: hidden (B, T, C) -> cls (B, C), or token cu[b] of a packed batch
// (hidden (N, C)); backward: dhidden overwritten, zero but at the first tokens.
void first_tokens_forward(TensorView cls, TensorView hidden, const TokenInputs& in);
void first_tokens_backward(TensorView dhidden, TensorView dcls, const TokenInputs& in);

inline uint32_t head_input_dropout_site() {
  return 0x10000;
}
inline uint32_t head_pooled_dropout_site() {
  return 0x10001;
}

}  // namespace ftune
