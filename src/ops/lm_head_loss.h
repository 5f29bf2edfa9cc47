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
// 16-bit compute (bf16 / f16, `compute`) takes autocast's numerics: the GEMMs' operands in that
// type (h's token chunk and the gradient block rounded to it; an fp32 head's vocabulary block cast
// to it, block by block; a head stored in 16 bits, a frozen head with the frozen base of a LoRA
// run, SequenceClassifier::frozen_16bit, read as it is), fp32 accumulation, fp32 logits and
// log-sum-exp, dW (an fp32 head that trains) accumulated in fp32. A 16-bit head is frozen (no dW).
// Every block is summed in a fixed order: results do not depend on the thread count's effect on
// anything but the GEMMs themselves. The CUDA twin (lm_head_loss_cuda.cu) runs the same blocks
// through cuBLASLt with small kernels for the softmax work and never waits for the host: the
// tokens counted are counted on the device from the labels (the loss and the gradient divide by
// them there), and lm_head_loss_counted reads them back only when asked.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace ftune {

struct LmHeadLossShape {
  int64_t tokens = 0, hidden = 0, vocab = 0;
  int64_t token_chunk = 256, vocab_chunk = 4096;
  float softcap = 0;  // > 0: logits s tanh(x / s) (Gemma 2); 0: off
  DType head = DType::F32;  // W's storage type: f32, or bf16 / f16 (a frozen 16-bit head)
  // The GEMMs' operand type: f32, or bf16 / f16 (autocast); a 16-bit head's own type when it
  // is one (f32 here then means that type).
  DType compute = DType::F32;
};

// The GEMMs' operand type of s: the 16-bit head's type, else s.compute.
DType lm_head_loss_operand(const LmHeadLossShape& s);

// Where things lie in the workspace (offsets and sizes in floats, each region 16-byte aligned):
// the block of rows x cols fp32 logits first; then the per-row state of a token chunk (running
// sums as doubles, the total loss, running maxima, target logits) and the count of tokens counted
// (i32, with a flag for labels outside the vocabulary); with 16-bit operands, the token chunk of h
// and the gradient block in that type, and for an fp32 head its vocabulary block cast to it.
struct LmHeadLossLayout {
  int64_t rows = 0, cols = 0;  // the block: at most token_chunk x vocab_chunk
  int64_t state = 0;           // run_sum (rows doubles), total (1 double), run_max, target (rows)
  int64_t count = 0;           // i32 count, then the i32 flag
  int64_t h16 = 0, g16 = 0;    // 16-bit operands only (else 0)
  int64_t w16 = 0;             // 16-bit operands with an fp32 head only (else 0)
  int64_t floats = 0;          // the workspace's size
};
LmHeadLossLayout lm_head_loss_layout(const LmHeadLossShape& s);
// Floats of workspace the calls below need (lm_head_loss_layout(s).floats).
int64_t lm_head_loss_workspace(const LmHeadLossShape& s);

// Checked and dispatched (lm_head_loss.cc): h (T, H) f32, W (V, H) of type s.head, labels (T) i32,
// loss (1), lse (T), workspace (lm_head_loss_workspace floats at least); dW undefined when W is
// frozen (always with a 16-bit head). `dloss_at` (optional, in memory on the tensors' device: the
// trainer's per-micro-batch loss share, read when the kernel runs) multiplies dloss when the
// backward runs. `normalizer` is taken when the call is made (a replayed CUDA graph keeps it).
void lm_head_loss_forward(TensorView loss, TensorView lse, TensorView h, TensorView W,
                          TensorView labels, double normalizer, const LmHeadLossShape& s,
                          TensorView workspace);
void lm_head_loss_backward(TensorView dh, TensorView dW, TensorView lse, TensorView h,
                           TensorView W, TensorView labels, double normalizer, float dloss,
                           const float* dloss_at, const LmHeadLossShape& s, TensorView workspace);
// The tokens the last forward (or backward) on this workspace counted: read from the workspace
// (on a GPU a copy to the host, which waits for the compute stream).
int64_t lm_head_loss_counted(TensorView workspace, const LmHeadLossShape& s);

namespace cpu {

// loss (1 float), lse (T floats, kept for the backward); W of type s.head. Returns the tokens
// counted (also kept in the workspace).
int64_t lm_head_loss_forward(float* loss, float* lse, const float* h, const void* W,
                             const int32_t* labels, double normalizer, const LmHeadLossShape& s,
                             float* workspace);
// dh (T, H) and dW (V, H; null when W is frozen) are accumulated into (+=), as gradients are
// across micro-batches. `normalizer` as given to the forward.
void lm_head_loss_backward(float* dh, float* dW, const float* lse, const float* h, const void* W,
                           const int32_t* labels, double normalizer, float dloss,
                           const LmHeadLossShape& s, float* workspace);

}  // namespace cpu

namespace cuda {

// The same on the current device's compute stream; the count stays on the device (workspace).
void lm_head_loss_forward(float* loss, float* lse, const float* h, const void* W,
                          const int32_t* labels, double normalizer, const LmHeadLossShape& s,
                          float* workspace);
void lm_head_loss_backward(float* dh, float* dW, const float* lse, const float* h, const void* W,
                           const int32_t* labels, double normalizer, float dloss,
                           const float* dloss_at, const LmHeadLossShape& s, float* workspace);

}  // namespace cuda
}  // namespace ftune
