// One adapted linear module, y = x W^T + b with its LoRA or DoRA adapter, as the encoder's layers
// and BERT's pooler run it (the math is in ops/lora.h). AdapterSiteRun gathers the views of one
// pass; the frozen layer's own backward (dx = dy W, and W's gradients when it trains) is the
// caller's, between adapter_site_backward_scale and adapter_site_backward.
//
// With adapter dropout (p > 0, training) DoRA follows PEFT's DoRA variant: the frozen result stays
// that of the whole input x, and the adapter's terms (including a second frozen GEMM, in fp32 on
// the fp32 master weight) read x_d = dropout(x), whose mask is the LoRA branch's own.
//
// Mixed precision: the frozen GEMM in 16 bits (fp32 result); the LoRA branch and DoRA's norms, z
// and output scaling in fp32 on fp32 copies of a 16-bit x, y and dx (stage_*; y rounded once).
// Gradient rule: parameter gradients accumulate (+=); dx accumulates the adapter's part (+=).
#pragma once

#include "models/adapters.h"
#include "ops/lora.h"

namespace ftune {

struct AdapterSiteRun {
  AdapterWeights w, g;  // the adapter and its gradients (g undefined: no gradients)
  bool dora = false;
  float scale = 1.0f;
  TensorView weight, bias;  // the frozen fp32 weight (out, in) and its bias (may be undefined)
  TensorView gemm_weight;   // what the frozen GEMM reads: `weight`, or its 16-bit shadow
  TensorView weight_sq, norm, norm_workspace;  // DoRA's caches (adapters.h)
  // Planned buffers, cut to the batch's N rows here: u (N, r), DoRA's z (N, out), h (N, r).
  TensorView u, z, h;
  TensorView stage_x, stage_y, stage_dx;  // mixed precision: fp32 staging of x, y and dx
  LoraDropout dropout;                     // its scratch holds (N, in) floats when p > 0
};

// The adapter (layer, kind) of `ad`: its weights, its gradients in `grads` (null or empty: none),
// the method, the scaling and DoRA's caches; the caller adds the frozen linear, the planned
// buffers and the dropout.
AdapterSiteRun adapter_run(const AdapterSet& ad, const AdapterSet* grads, int64_t layer, int kind);
// The same with the frozen weight and bias and the planned u, z and h set; the caller sets
// gemm_weight (when not `weight`), the staging buffers and the dropout.
AdapterSiteRun adapter_site_run(const AdapterSet& ad, const AdapterSet* grads, int64_t layer,
                                int kind, TensorView weight, TensorView bias, TensorView u,
                                TensorView z, TensorView h);

// y (N, out) = x W^T + b + the adapter's term. x: the adapter's input; xg: the frozen GEMM's (x,
// or its 16-bit copy). y_has_base: y already holds x W^T + b (a fused GEMM ran). recompute:
// checkpointing's second forward (the DoRA norms of the first are kept).
void adapter_site_forward(const AdapterSiteRun& s, TensorView y, TensorView x, TensorView xg,
                          bool y_has_base, bool recompute);
// Before the frozen layer's backward: DoRA's magnitude gradient, and the gradient dy that the
// frozen layer then reads (dy *= m / n in place; with adapter dropout dy stays, see ops/lora.h).
void adapter_site_backward_scale(const AdapterSiteRun& s, TensorView dy);
// After the frozen layer's backward: A's and B's gradients, and the adapter's input gradient
// added to dx (skipped when dx is undefined).
void adapter_site_backward(const AdapterSiteRun& s, TensorView dy, TensorView x, TensorView dx);

}  // namespace ftune
