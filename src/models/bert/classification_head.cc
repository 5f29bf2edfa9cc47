// Classification heads: forward and backward (see classification_head.h).
#include "models/bert/classification_head.h"

#include "core/memory.h"
#include "models/adapters.h"
#include "models/layers/adapted_linear.h"
#include "ops/dropout.h"
#include "ops/linear.h"
#include "ops/tanh_pooler.h"

namespace ftune {
namespace {

float head_p(const EncoderConfig& c, const DropoutPlan& d) {
  return d.training ? c.classifier_dropout : 0.0f;
}

// The head's (B, C) activations: one position per sequence, element (b, c) draws stream element
// (row0 + b) * C + c.
DropoutRows head_rows(const DropoutPlan& d) {
  return DropoutRows{d.row0, 1, 1};
}

// BERT's pooler.dense as an adapted linear block (models/layers/adapted_linear.h), all in fp32:
// the head reads the fp32 hidden state and the fp32 weights. grads: empty in forward.
AdaptedLinear pooler_linear(const EncoderConfig& c, const HeadWeights& w, const HeadWeights* g,
                            const HeadActivations& a, const AdapterSet& ad,
                            const AdapterSet& grads, const DropoutPlan& d) {
  const LinearParams p{w.dense_w, w.dense_b, w.dense_w, w.dense_b,
                       g ? g->dense_w : TensorView(), g ? g->dense_b : TensorView()};
  const AdapterSite s = pooler_adapter_site(c);
  const AdapterPass pass{&ad, &grads, a.adapter_scratch, d};
  return AdaptedLinear(p, pass,
                       AdapterSlot{s.layer, s.kind, a.pooler_adapter, pooler_adapter_dropout_site(),
                                   head_rows(d)});
}

}  // namespace

std::vector<std::string> head_param_names(const EncoderConfig& c) {
  if (c.variant == BertVariant::Bert)
    return {"bert.pooler.dense.weight", "bert.pooler.dense.bias", "classifier.weight",
            "classifier.bias"};
  return {"classifier.dense.weight", "classifier.dense.bias", "classifier.out_proj.weight",
          "classifier.out_proj.bias"};
}

void add_head_params(const EncoderConfig& c, ParamTable& t) {
  const int64_t C = c.hidden_size, K = c.num_labels();
  const auto names = head_param_names(c);
  t.add(names[0], {C, C});
  t.add(names[1], {C});
  t.add(names[2], {K, C});
  t.add(names[3], {K});
}

HeadWeights bind_head_weights(const EncoderConfig& c, const ParamViews& p) {
  const auto names = head_param_names(c);
  return HeadWeights{p.get(names[0]), p.get(names[1]), p.get(names[2]), p.get(names[3])};
}

AdapterSite pooler_adapter_site(const EncoderConfig& c) {
  return AdapterSite{c.num_layers, 0, "bert.pooler.dense", c.hidden_size, c.hidden_size};
}

void head_buffers(const EncoderConfig& c, int64_t max_rows, bool training,
                  const AdapterConfig& adapters, HeadActivations& a, BufferTable& t) {
  const int64_t C = c.hidden_size, K = c.num_labels();
  t.add("act/head/cls", DType::F32, {max_rows, C}, &a.cls);
  // RoBERTa's head drops out its input into x first; BERT's pooler reads cls itself.
  if (c.roberta_like()) t.add("act/head/x", DType::F32, {max_rows, C}, &a.x);
  t.add("act/head/pooled", DType::F32, {max_rows, C}, &a.pooled);
  t.add("act/head/pooled_drop", DType::F32, {max_rows, C}, &a.pooled_drop);
  t.add("act/head/logits", DType::F32, {max_rows, K}, &a.logits);
  if (training) {
    t.add("gradact/head/pooled", DType::F32, {max_rows, C}, &a.grad_pooled);
    t.add("gradact/head/x", DType::F32, {max_rows, C}, &a.grad_x);
    t.add("gradact/head/scratch", DType::F32, {max_rows, C}, &a.grad_scratch);
  }
  if (c.variant != BertVariant::Bert ||
      targeted_sites({pooler_adapter_site(c)}, adapters).empty())
    return;
  add_adapter_site_buffers(t, "act/head/lora_u", "act/head/dora_z", max_rows, C, adapters,
                           {&a.pooler_adapter});
  if (!training) return;
  add_adapter_h(t, "gradact/head/lora_h", max_rows, adapters, a.adapter_scratch);
  add_adapter_dropout(t, "work/head/lora_dropout", {max_rows, C}, adapters, a.adapter_scratch);
}

TensorView head_forward(const EncoderConfig& c, const HeadWeights& w, HeadActivations& a,
                        TensorView hidden, const TokenInputs& in, const DropoutPlan& d,
                        const AdapterSet& adapters) {
  const int64_t B = in.B, C = c.hidden_size, K = c.num_labels();
  const Shape BC{B, C};
  const float p = head_p(c, d);
  TensorView cls = a.cls.prefix(BC), pooled = a.pooled.prefix(BC);
  TensorView pooled_drop = a.pooled_drop.prefix(BC), logits = a.logits.prefix({B, K});
  first_tokens_forward(cls, hidden, in);
  if (c.roberta_like())
    dropout_forward(a.x.prefix(BC), cls, p,
                    RngKey{d.seed, head_input_dropout_site(), d.offset, d.micro}, head_rows(d));
  const TensorView pooler_in = c.roberta_like() ? a.x.prefix(BC) : cls;
  const AdaptedLinear pooler = pooler_linear(c, w, nullptr, a, adapters, AdapterSet(), d);
  if (pooler.adapted()) {
    pooler.forward(pooled, pooler_in);
    tanh_forward(pooled);
  } else {
    tanh_pooler_forward(pooled, pooler_in, w.dense_w, w.dense_b);
  }
  dropout_forward(pooled_drop, pooled, p, RngKey{d.seed, head_pooled_dropout_site(), d.offset, d.micro},
                  head_rows(d));
  linear_forward(logits, pooled_drop, w.out_w, w.out_b);
  return logits;
}

void head_backward(const EncoderConfig& c, const HeadWeights& w, const HeadWeights& g,
                   HeadActivations& a, TensorView dlogits, TensorView dhidden,
                   const TokenInputs& in, const DropoutPlan& d, const AdapterSet& adapters,
                   const AdapterSet& adapter_grads) {
  const int64_t B = dlogits.dim(0), C = c.hidden_size;
  const Shape BC{B, C};
  const float p = head_p(c, d);
  TensorView dpooled = a.grad_pooled.prefix(BC), dx = a.grad_x.prefix(BC);
  linear_backward(dpooled, g.out_w, g.out_b, dlogits, a.pooled_drop.prefix(BC), w.out_w);
  dropout_backward(dpooled, dpooled, p, RngKey{d.seed, head_pooled_dropout_site(), d.offset, d.micro},
                   head_rows(d));
  const TensorView pooler_in = c.roberta_like() ? a.x.prefix(BC) : a.cls.prefix(BC);
  const AdaptedLinear pooler = pooler_linear(c, w, &g, a, adapters, adapter_grads, d);
  if (pooler.adapted()) {
    const TensorView dpre = a.grad_scratch.prefix(BC);
    tanh_backward(dpre, dpooled, a.pooled.prefix(BC));
    pooler.backward(dpre, pooler_in, dx);
  } else {
    tanh_pooler_backward(dx, g.dense_w, g.dense_b, dpooled, pooler_in, a.pooled.prefix(BC),
                         w.dense_w, a.grad_scratch.prefix(BC));
  }
  if (c.roberta_like())
    dropout_backward(dx, dx, p, RngKey{d.seed, head_input_dropout_site(), d.offset, d.micro}, head_rows(d));
  first_tokens_backward(dhidden, dx, in);
}

}  // namespace ftune
