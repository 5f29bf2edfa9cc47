// ModernBERT's pooling and classification head, forward and backward (see modernbert.h):
//   pooled = first token (cls) or the mean of the real tokens (mean) of `hidden`
//   z = pooled dense^T (+ bias); g = act(z); p = LayerNorm(g); logits = dropout(p) W^T + b
// head.dense may carry an adapter (the site past the last layer). The head's (B, C) activations
// draw dropout stream element (row0 + b) * C + c, as the encoder heads'.
#include "core/memory.h"
#include "models/head_pooling.h"
#include "models/layers/adapted_linear.h"
#include "models/modernbert/modernbert.h"
#include "ops/dropout.h"
#include "ops/gelu.h"
#include "ops/layer_norm.h"
#include "ops/linear.h"
#include "ops/mean_pool.h"

namespace ftune {
namespace {

DropoutRows head_rows(const DropoutPlan& d) {
  return DropoutRows{d.row0, 1, 1};
}

MeanPoolRows mean_rows(const TokenInputs& in) {
  if (in.packed()) return MeanPoolRows{in.B, 0, {}, in.cu_seqlens.prefix({in.B + 1})};
  return MeanPoolRows{in.B, in.T, in.mask.prefix({in.B * in.T}), {}};
}

// hidden as the pooling ops read it: (B, T, C) padded, (N, C) packed.
TensorView pool_input(const TensorView& buffer, const TokenInputs& in, int64_t C) {
  return in.packed() ? buffer.prefix({in.N, C}) : buffer.prefix({in.B, in.T, C});
}

// head.dense as an adapted linear block (models/layers/adapted_linear.h), all in fp32; its adapter
// is the site past the last layer. g: the gradients (backward only).
AdaptedLinear dense_linear(const ModernBertConfig& c, const ModernBertWeights& w,
                           const ModernBertWeights* g, const ModernBertActs& a,
                           const DropoutPlan& d) {
  const int64_t L = c.num_layers;
  const LinearParams p{w.dense_w, w.dense_b, w.dense_w, w.dense_b,
                       g ? g->dense_w : TensorView(), g ? g->dense_b : TensorView()};
  AdapterScratch scratch = a.adapter_scratch;  // the head is fp32: no staging
  scratch.stage_x = scratch.stage_y = scratch.stage_dx = TensorView();
  const AdapterPass pass{&w.adapters, g ? &g->adapters : nullptr, scratch, d};
  return AdaptedLinear(p, pass,
                       AdapterSlot{L, 0, a.head_adapter, adapter_dropout_site(L, 0), head_rows(d)});
}

}  // namespace

TensorView modernbert_head_forward(const ModernBertConfig& c, const ModernBertWeights& w,
                                   ModernBertActs& a, const TokenInputs& in, const DropoutPlan& d) {
  const int64_t B = in.B, C = c.hidden_size;
  const TensorView hidden = pool_input(a.hidden, in, C), pooled = a.pooled.prefix({B, C});
  if (c.pooling == ModernBertPooling::Cls) first_tokens_forward(pooled, hidden, in);
  else mean_pool_forward(pooled, hidden, mean_rows(in));
  const TensorView z = a.z.prefix({B, C}), g = a.g.prefix({B, C}), p = a.p.prefix({B, C});
  dense_linear(c, w, nullptr, a, d).forward(z, pooled);
  gelu_forward(g, z, c.classifier_activation);
  layer_norm_forward(p, a.head_mean.prefix({B}), a.head_rstd.prefix({B}), g, w.head_norm_w,
                     w.head_norm_b, c.norm_eps);
  const TensorView p_drop = a.p_drop.prefix({B, C});
  const float rate = d.training ? c.classifier_dropout : 0.0f;
  if (rate > 0)
    dropout_forward(p_drop, p, rate, RngKey{d.seed, modernbert_classifier_site(), d.offset, d.micro},
                    head_rows(d));
  else
    copy(p_drop, p);
  const TensorView logits = a.logits.prefix({B, c.num_labels()});
  linear_forward(logits, p_drop, w.cls_w, w.cls_b);
  return logits;
}

void modernbert_head_backward(const ModernBertConfig& c, const ModernBertWeights& w,
                              const ModernBertWeights& g, ModernBertActs& a, TensorView dlogits,
                              const TokenInputs& in, const DropoutPlan& d) {
  const int64_t B = in.B, C = c.hidden_size;
  const TensorView d1 = a.db1.prefix({B, C}), d2 = a.db2.prefix({B, C});
  linear_backward(d1, g.cls_w, g.cls_b, dlogits, a.p_drop.prefix({B, C}), w.cls_w);
  const float rate = d.training ? c.classifier_dropout : 0.0f;
  if (rate > 0)
    dropout_backward(d1, d1, rate, RngKey{d.seed, modernbert_classifier_site(), d.offset, d.micro},
                     head_rows(d));
  layer_norm_backward(d2, g.head_norm_w, g.head_norm_b, d1, a.g.prefix({B, C}), w.head_norm_w,
                      a.head_mean.prefix({B}), a.head_rstd.prefix({B}));
  const TensorView z = a.z.prefix({B, C}), pooled = a.pooled.prefix({B, C});
  gelu_backward(d1, z, d2, c.classifier_activation);  // dz
  dense_linear(c, w, &g, a, d).backward(d1, pooled, d2);  // dpooled
  const TensorView dhidden = pool_input(a.dh, in, C);
  if (c.pooling == ModernBertPooling::Cls) first_tokens_backward(dhidden, d2, in);
  else mean_pool_backward(dhidden, d2, mean_rows(in));
}

}  // namespace ftune
