// Classification heads: forward and backward (see classification_head.h).
#include "models/classification_head.h"

#include "models/adapter_site.h"
#include "ops/dropout.h"
#include "ops/first_token.h"
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

bool pooler_adapter_on(const EncoderAdapters* ad) {
  return ad != nullptr && ad->pooler.defined();
}

// BERT's pooler.dense with its adapter, as models/adapter_site.h runs it (all in fp32: the head
// reads the fp32 hidden state and the fp32 weights).
AdapterSiteRun pooler_run(const HeadWeights& w, const HeadActivations& a, const EncoderAdapters& ad,
                          const EncoderAdapters* grads, const DropoutPlan& d) {
  AdapterSiteRun r;
  r.w = ad.pooler;
  if (grads) r.g = grads->pooler;
  r.dora = ad.dora;
  r.scale = ad.scale;
  r.weight = r.gemm_weight = w.dense_w;
  r.bias = w.dense_b;
  r.weight_sq = ad.pooler_weight_sq;
  r.norm = ad.pooler_norm;
  r.norm_workspace = ad.norm_workspace;
  r.u = a.lora_u;
  r.z = a.dora_z;
  r.h = a.lora_h;
  r.dropout = LoraDropout{d.training ? ad.dropout : 0.0f,
                          RngKey{d.seed, pooler_adapter_dropout_site(), d.offset, d.micro},
                          a.lora_scratch, head_rows(d)};
  return r;
}

}  // namespace

std::vector<std::string> head_param_names(const EncoderConfig& c) {
  if (c.family == ModelFamily::Bert)
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

HeadWeights bind_head_weights(const EncoderConfig& c, const ParamTable& t, TensorView flat) {
  const auto names = head_param_names(c);
  return HeadWeights{
      ParamTable::slice(flat, t.at(names[0])), ParamTable::slice(flat, t.at(names[1])),
      ParamTable::slice(flat, t.at(names[2])), ParamTable::slice(flat, t.at(names[3]))};
}

void plan_head_activations(const EncoderConfig& c, int64_t max_batch, bool training,
                           ArenaPlan& plan, const AdapterConfig& adapters) {
  const int64_t C = c.hidden_size, K = c.num_labels();
  for (const char* name : {"act/head/cls", "act/head/x", "act/head/pooled", "act/head/pooled_drop"})
    plan.add(name, DType::F32, {max_batch, C});
  plan.add("act/head/logits", DType::F32, {max_batch, K});
  if (training)
    for (const char* name : {"gradact/head/pooled", "gradact/head/x", "gradact/head/scratch"})
      plan.add(name, DType::F32, {max_batch, C});
  if (!pooler_adapted(c, adapters)) return;
  plan.add("act/head/lora_u", DType::F32, {max_batch, adapters.r});
  if (adapters.dora()) plan.add("act/head/dora_z", DType::F32, {max_batch, C});
  if (training) plan.add("gradact/head/lora_h", DType::F32, {max_batch, adapters.r});
  if (training && adapters.dropout > 0) plan.add("work/head/lora_dropout", DType::F32, {max_batch, C});
}

HeadActivations bind_head_activations(const Arena& arena, bool training) {
  HeadActivations a;
  a.cls = arena.view("act/head/cls");
  a.x = arena.view("act/head/x");
  a.pooled = arena.view("act/head/pooled");
  a.pooled_drop = arena.view("act/head/pooled_drop");
  a.logits = arena.view("act/head/logits");
  if (training) {
    a.grad_pooled = arena.view("gradact/head/pooled");
    a.grad_x = arena.view("gradact/head/x");
    a.grad_scratch = arena.view("gradact/head/scratch");
  }
  for (auto [name, view] : {std::pair{"act/head/lora_u", &a.lora_u},
                            std::pair{"act/head/dora_z", &a.dora_z},
                            std::pair{"gradact/head/lora_h", &a.lora_h},
                            std::pair{"work/head/lora_dropout", &a.lora_scratch}})
    if (arena.plan().contains(name)) *view = arena.view(name);
  return a;
}

TensorView head_forward(const EncoderConfig& c, const HeadWeights& w, HeadActivations& a,
                        TensorView hidden, const DropoutPlan& d, const EncoderAdapters* adapters) {
  const int64_t B = hidden.dim(0), C = c.hidden_size, K = c.num_labels();
  const Shape BC{B, C};
  const float p = head_p(c, d);
  TensorView cls = a.cls.prefix(BC), x = a.x.prefix(BC), pooled = a.pooled.prefix(BC);
  TensorView pooled_drop = a.pooled_drop.prefix(BC), logits = a.logits.prefix({B, K});
  first_token_forward(cls, hidden);
  if (c.roberta_like())
    dropout_forward(x, cls, p, RngKey{d.seed, head_input_dropout_site(), d.offset, d.micro}, head_rows(d));
  const TensorView pooler_in = c.roberta_like() ? x : cls;
  if (pooler_adapter_on(adapters)) {
    adapter_site_forward(pooler_run(w, a, *adapters, nullptr, d), pooled, pooler_in, pooler_in,
                         /*y_has_base=*/false, /*recompute=*/false);
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
                   const DropoutPlan& d, const EncoderAdapters* adapters,
                   const EncoderAdapters* adapter_grads) {
  const int64_t B = dlogits.dim(0), C = c.hidden_size;
  const Shape BC{B, C};
  const float p = head_p(c, d);
  TensorView dpooled = a.grad_pooled.prefix(BC), dx = a.grad_x.prefix(BC);
  linear_backward(dpooled, g.out_w, g.out_b, dlogits, a.pooled_drop.prefix(BC), w.out_w);
  dropout_backward(dpooled, dpooled, p, RngKey{d.seed, head_pooled_dropout_site(), d.offset, d.micro},
                   head_rows(d));
  const TensorView pooler_in = c.roberta_like() ? a.x.prefix(BC) : a.cls.prefix(BC);
  if (pooler_adapter_on(adapters)) {
    const AdapterSiteRun run = pooler_run(w, a, *adapters, adapter_grads, d);
    const TensorView dpre = a.grad_scratch.prefix(BC);
    tanh_backward(dpre, dpooled, a.pooled.prefix(BC));
    adapter_site_backward_scale(run, dpre);
    linear_backward(dx, g.dense_w, g.dense_b, dpre, pooler_in, w.dense_w);
    adapter_site_backward(run, dpre, pooler_in, dx);
  } else {
    tanh_pooler_backward(dx, g.dense_w, g.dense_b, dpooled, pooler_in, a.pooled.prefix(BC),
                         w.dense_w, a.grad_scratch.prefix(BC));
  }
  if (c.roberta_like())
    dropout_backward(dx, dx, p, RngKey{d.seed, head_input_dropout_site(), d.offset, d.micro}, head_rows(d));
  first_token_backward(dhidden, dx);
}

}  // namespace ftune
