// The feed-forward layer block: y = out(act(in(x))), the two adapted linear layers
// (models/layers/adapted_linear.h) around a GELU (BERT, RoBERTa, XLM-R, DeBERTa: in is (F, C)) or
// a gated activation on the fused [gate | up] output of in (ModernBERT's GeGLU, whose Wi is one
// site, and the decoders' gated MLP, whose gate and up are two adapted row blocks of one fused
// GEMM (models/layers/fused_linear.h): in is (2F, C)), with an optional dropout on the
// activation's output (ModernBERT's mlp_dropout). The families keep what surrounds it (the
// residual, the norms and their dropouts, the decoders' sandwich norm), which differs between them.
//
// Gradient rule: the linears' parameter gradients accumulate (+=); dx is written (=) or
// accumulated (+=) as the caller says.
#pragma once

#include <utility>

#include "models/layers/adapted_linear.h"
#include "models/layers/fused_linear.h"
#include "ops/gelu.h"
#include "ops/glu.h"

namespace ftune {

// The activation between the two linears: GELU of `gelu`'s form, or the gated `glu`.
struct FeedForwardActivation {
  bool gated = false;
  GeluForm gelu = GeluForm::Erf;
  GluAct glu = GluAct::GeluErf;
  static FeedForwardActivation Gelu(GeluForm form) { return {false, form, GluAct::GeluErf}; }
  static FeedForwardActivation Gated(GluAct act) { return {true, GeluForm::Erf, act}; }
};

// Dropout on the activation's output, in place (p = 0: none).
struct FeedForwardDropout {
  float p = 0.0f;
  RngKey rng;
  DropoutRows rows;
};

class FeedForward {
 public:
  FeedForward(FusedLinear in, AdaptedLinear out, FeedForwardActivation act,
              FeedForwardDropout dropout = {})
      : in_(std::move(in)), out_(std::move(out)), act_(act), dropout_(dropout) {}

  // x (N, C) -> pre (N, F or 2F) -> h (N, F) -> y (N, C). x: in's adapter input, xg: its GEMM's
  // (x, or its 16-bit copy); recompute: checkpointing's second forward (adapted_linear.h).
  void forward(TensorView y, TensorView h, TensorView pre, TensorView x, TensorView xg,
               bool recompute = false) const;
  // dy (N, C) (DoRA may scale it in place: it is not needed afterwards) -> dh (N, F) -> dpre
  // (N, F or 2F; may be dh itself for GELU) -> dx (N, C), = or += with accumulate. h, pre, x, xg:
  // forward's.
  void backward(TensorView dy, TensorView h, TensorView dh, TensorView pre, TensorView dpre,
                TensorView x, TensorView xg, TensorView dx, bool accumulate = false) const;

 private:
  FusedLinear in_;
  AdaptedLinear out_;
  FeedForwardActivation act_;
  FeedForwardDropout dropout_;
};

}  // namespace ftune
