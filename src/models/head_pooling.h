// What the families' sequence-classification heads share: the first token of every row (BERT's
// and DeBERTa's pooling, ModernBERT's "cls" pooling: models/layers/first_token_rows.h) and the
// dropout streams of a head's input and pooled dropouts (BERT's models/bert/classification_head.h
// and DeBERTa's head draw the same ones).
#pragma once

#include <cstdint>

#include "models/backbone.h"
#include "models/layers/first_token_rows.h"

namespace ftune {

inline uint32_t head_input_dropout_site() {
  return 0x10000;
}
inline uint32_t head_pooled_dropout_site() {
  return 0x10001;
}

}  // namespace ftune
