// The adapted linear layer block: one linear site y = x W^T + b of a model, with everything that
// sits on it — its fp32 weight and bias, what its GEMM reads (the 16-bit shadow of a frozen or
// trained base under mixed precision, else the fp32 ones), its weight and bias gradients
// (undefined: frozen), and its LoRA or DoRA adapter with the adapter's buffers and dropout. A
// family describes a site once (LinearParams, AdapterSlot) against the pass's shared adapter state
// (AdapterPass) and gets an AdaptedLinear whose forward and backward run the frozen or trained
// linear and the adapter together, so no family fills in adapter wiring itself. The adapter's math
// is models/adapter_site.h (and ops/lora.h); its buffers are planned by models/layers/
// adapter_buffers.h.
//
// Fused GEMMs (BERT's and DeBERTa's QKV, the decoders' QKV and gate|up) run one unadapted
// AdaptedLinear over the fused matrix and one AdaptedLinear per block for the adapters, in the
// order backward_scale (all blocks) -> the fused backward -> backward_adapter (all blocks).
// Gradient rule: parameter gradients accumulate (+=); dx is written (=) or accumulated (+=) as
// the caller says; the adapter's input gradient is added to dx.
#pragma once

#include <cstdint>

#include "models/adapter_site.h"
#include "models/adapters.h"
#include "models/backbone.h"
#include "models/layers/adapter_buffers.h"

namespace ftune {

// The base linear of a site: views of the parameters (row blocks of a fused matrix for a block).
struct LinearParams {
  TensorView weight, bias;            // fp32 (out, in), (out); bias may be undefined
  TensorView gemm_weight, gemm_bias;  // what the frozen GEMM reads (16-bit shadow or fp32)
  TensorView weight_grad, bias_grad;  // gradients; undefined: frozen
};

// What every adapted linear of one pass shares.
struct AdapterPass {
  const AdapterSet* adapters = nullptr;  // null or empty: no adapters
  const AdapterSet* grads = nullptr;     // null or empty: no adapter gradients (forward)
  AdapterScratch scratch;
  DropoutPlan dropout;  // the step's plan: training, seed, offset, micro-batch
};

// Which adapter a site runs and with what: adapter (layer, kind), its buffers, and its dropout's
// Philox site and rows.
struct AdapterSlot {
  int64_t layer = 0;
  int kind = 0;
  AdapterSiteBuffers buffers;
  uint32_t dropout_site = 0;
  DropoutRows dropout_rows;
};

class AdaptedLinear {
 public:
  AdaptedLinear() = default;
  // A plain linear (no adapter).
  explicit AdaptedLinear(const LinearParams& p) : p_(p) {}
  // A linear with the adapter of `slot` when `pass` has one there.
  AdaptedLinear(const LinearParams& p, const AdapterPass& pass, const AdapterSlot& slot);

  bool adapted() const { return adapted_; }
  bool dora() const { return adapted_ && run_.dora; }
  const LinearParams& params() const { return p_; }

  // y (N, out) = x W^T + b + the adapter's term. x: the adapter's input; xg: the GEMM's (x itself,
  // or its 16-bit copy). y_has_base: y already holds the frozen x W^T + b (a fused GEMM ran; then
  // an unadapted block does nothing). recompute: checkpointing's second forward (DoRA keeps its
  // norms).
  void forward(TensorView y, TensorView x, TensorView xg, bool y_has_base = false,
               bool recompute = false) const;
  void forward(TensorView y, TensorView x) const { forward(y, x, x); }

  // The whole backward: DoRA's scaling of dy (in place: dy is not needed afterwards), the base
  // linear's gradients (dx = or += dy W with accumulate; undefined dx: not formed), then the
  // adapter's gradients and its input gradient added to dx. x, xg: as forward's. guard: skip the
  // base GEMMs when nothing they write is wanted.
  void backward(TensorView dy, TensorView x, TensorView xg, TensorView dx, bool accumulate = false,
                bool guard = false) const;
  void backward(TensorView dy, TensorView x, TensorView dx) const { backward(dy, x, x, dx); }
  // The pieces, for a fused GEMM's blocks: before the base backward (DoRA's magnitude gradient
  // and dy *= m / n), and after it (A's and B's gradients, the input gradient added to dx).
  void backward_scale(TensorView dy) const;
  void backward_adapter(TensorView dy, TensorView x, TensorView dx) const;
  // The base linear's backward alone (dx = or += dy W, the weight's and bias's gradients).
  void base_backward(TensorView dy, TensorView xg, TensorView dx, bool accumulate = false,
                     bool guard = false) const;

 private:
  LinearParams p_;
  AdapterSiteRun run_;
  bool adapted_ = false;
};

}  // namespace ftune
