// First-token pooling of the families' heads (see head_pooling.h).
#include "models/head_pooling.h"

#include "ops/first_token.h"

namespace ftune {

// Read on the device for a packed batch (ops/first_token.h).
void first_tokens_forward(TensorView cls, TensorView hidden, const TokenInputs& in) {
  if (in.packed())
    first_token_forward(cls, hidden, in.cu_seqlens);
  else
    first_token_forward(cls, hidden);
}

void first_tokens_backward(TensorView dhidden, TensorView dcls, const TokenInputs& in) {
  if (in.packed())
    first_token_backward(dhidden, dcls, in.cu_seqlens);
  else
    first_token_backward(dhidden, dcls);
}

}  // namespace ftune
