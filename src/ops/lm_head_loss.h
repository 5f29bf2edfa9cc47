// A causal language model's loss through its last projection, without ever holding the
// (tokens x vocabulary) logits (issue 40; Liger-Kernel's fused linear cross-entropy does the
// same on GPUs). With hidden states h (T, H), the lm_head weight W (V, H) (tied to the input
// embedding or not; no bias, as every supported family) and labels y (T), already shifted so
// that y[t] is the token after position t and negative where not counted (prompt tokens,
// padding, sequence ends: ignore_index -100):
//   logits[t, v] = h[t] . W[v]
//   loss = sum over counted t of (logsumexp_v logits[t, v] - logits[t, y[t]]) / N
// N = `normalizer` when > 0 (the tokens counted over every micro-batch of an optimizer step, as
// transformers' num_items_in_batch), else the tokens counted here (a mean: NaN when none is,
// as PyTorch's cross_entropy). The work goes by blocks of token_chunk x vocab_chunk logits: the
// forward keeps a running maximum and sum per token (an online logsumexp) and keeps only
// lse (T floats); the backward computes each block again, turns it into
//   g[t, v] = (softmax[t, v] - [v == y[t]]) * dloss / N     (0 on rows not counted)
// and accumulates dh += g W and, when W trains, dW += g^T h, so memory is one block of floats
// whatever the vocabulary (128k x 2k tokens: 4 MiB at the default chunks, not 1 GiB).
// Gemma 2's final logit soft-capping (softcap s > 0, HF's final_logit_softcapping) replaces
// each logit x by z = s tanh(x / s) before the softmax; its backward multiplies g by
// dz/dx = 1 - (z / s)^2.
// Every block is summed in a fixed order: results do not depend on the thread count's effect on
// anything but the GEMMs themselves.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace ftune {

struct LmHeadLossShape {
  int64_t tokens = 0, hidden = 0, vocab = 0;
  int64_t token_chunk = 256, vocab_chunk = 4096;
  float softcap = 0;  // > 0: logits s tanh(x / s) (Gemma 2); 0: off
};

// Floats of workspace the calls below need: one block of logits.
int64_t lm_head_loss_workspace(const LmHeadLossShape& s);

// Checked and dispatched (lm_head_loss.cc): h (T, H) and W (V, H) f32, labels (T) i32, loss (1),
// lse (T), workspace (lm_head_loss_workspace floats at least); dW undefined when W is frozen.
// `dloss_at` (optional) multiplies dloss when the backward runs. CPU only so far: on a GPU it
// throws (the CUDA twin is not written).
int64_t lm_head_loss_forward(TensorView loss, TensorView lse, TensorView h, TensorView W,
                             TensorView labels, double normalizer, const LmHeadLossShape& s,
                             TensorView workspace);
void lm_head_loss_backward(TensorView dh, TensorView dW, TensorView lse, TensorView h,
                           TensorView W, TensorView labels, double normalizer, float dloss,
                           const float* dloss_at, const LmHeadLossShape& s, TensorView workspace);

namespace cpu {

// loss (1 float), lse (T floats, kept for the backward). Returns the tokens counted.
int64_t lm_head_loss_forward(float* loss, float* lse, const float* h, const float* W,
                             const int32_t* labels, double normalizer, const LmHeadLossShape& s,
                             float* workspace);
// dh (T, H) and dW (V, H; null when W is frozen) are accumulated into (+=), as gradients are
// across micro-batches. `normalizer` as given to the forward.
void lm_head_loss_backward(float* dh, float* dW, const float* lse, const float* h, const float* W,
                           const int32_t* labels, double normalizer, float dloss,
                           const LmHeadLossShape& s, float* workspace);

}  // namespace cpu
}  // namespace ftune
