// Encoder forward and backward passes (see encoder.h for the equations and the gradient rule).
#include "models/encoder.h"

#include <fmt/format.h>

#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/layer_norm.h"
#include "ops/linear.h"
#include "ops/lora.h"

namespace ftune {
namespace {

std::string layer_prefix(const EncoderConfig& c, int64_t l) {
  return fmt::format("{}.encoder.layer.{}.", c.weight_prefix(), l);
}

std::string act_name(int64_t slot, const char* what) {
  return fmt::format("act/layer{}/{}", slot, what);
}

float dropout_p(const DropoutPlan& d, float p) {
  return d.training ? p : 0.0f;
}

RngKey key(const DropoutPlan& d, uint32_t site) {
  return RngKey{d.seed, site, d.offset};
}

// Stream indices of the (B*T, inner) activations of a batch of padded length T.
DropoutRows rows(const DropoutPlan& d, int64_t T) {
  return DropoutRows{d.row0, T, d.stream_seq};
}

// Columns [begin, begin + count) of a row-major 2-D view (a block of the fused QKV matrix).
TensorView columns(const TensorView& v, int64_t begin, int64_t count) {
  TensorView out = v;
  out.data = static_cast<char*>(v.data) + begin * static_cast<int64_t>(dtype_size(v.dtype));
  out.shape = Shape{v.dim(0), count};
  return out;
}

AdapterSite qkv_site(int part) {
  return static_cast<AdapterSite>(part);
}

// The sites with an adapter in any layer (their activations are planned per slot).
std::array<bool, kAdapterSites> adapted_sites(const EncoderConfig& c, const AdapterConfig& ac) {
  std::array<bool, kAdapterSites> on{};
  if (!ac.enabled()) return on;
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int i = 0; i < kAdapterSites; ++i)
      on[i] = on[i] || ac.targets(adapter_module_name(c, l, static_cast<AdapterSite>(i)));
  return on;
}

LoraDropout lora_dropout(const EncoderAdapters& ad, const EncoderActivations& a,
                         const DropoutPlan& d, int64_t T, int64_t l, AdapterSite s) {
  LoraDropout drop;
  drop.p = dropout_p(d, ad.dropout);
  drop.rng = key(d, adapter_dropout_site(l, s));
  drop.rows = rows(d, T);
  drop.scratch = a.lora_scratch;
  return drop;
}

bool has_dora(const EncoderWeights& w, int64_t l, AdapterSite s) {
  return w.adapters.any() && w.adapters.dora && w.adapters.at(l, s).defined();
}

// The frozen linear of (l, s) with its adapter, if any, into y (N, out). y_has_base: y already
// holds the frozen x W^T + b (the fused QKV GEMM ran); otherwise this computes it. DoRA forms
// z = x W^T in its own buffer (no bias to strip) when it can.
void adapter_forward(const EncoderWeights& w, LayerActivations& la, const EncoderActivations& a,
                     int64_t l, AdapterSite s, TensorView y, TensorView x, const DropoutPlan& d,
                     int64_t T, bool y_has_base, bool recompute) {
  if (!y_has_base && !has_dora(w, l, s))
    linear_forward(y, x, adapted_weight(w, l, s), adapted_bias(w, l, s));
  const EncoderAdapters& ad = w.adapters;
  if (!ad.any() || !ad.at(l, s).defined()) return;
  const AdapterWeights& aw = ad.at(l, s);
  const int i = static_cast<int>(s);
  const int64_t N = x.dim(0);
  const TensorView u = la.lora_u[i].prefix({N, ad.r});
  const LoraDropout drop = lora_dropout(ad, a, d, T, l, s);
  if (!ad.dora) {
    lora_forward(y, u, x, aw.a, aw.b, ad.scale, drop);
    return;
  }
  const TensorView z = la.dora_z[i].prefix({N, y.dim(1)}), bias = adapted_bias(w, l, s);
  const TensorView norm = ad.norm[l][i];
  // The weights do not change between forward and backward: a recomputation keeps the norms.
  if (!recompute)
    dora_norms(norm, ad.weight_sq[l][i], adapted_weight(w, l, s), aw.a, aw.b, ad.scale,
               ad.norm_workspace);
  if (y_has_base)
    dora_strip_bias(z, y, bias);
  else
    linear_forward(z, x, adapted_weight(w, l, s), TensorView());
  lora_forward(z, u, x, aw.a, aw.b, ad.scale, drop);
  dora_output_forward(y, z, bias, aw.magnitude, norm);
}

// Before the frozen layer's backward: DoRA's magnitude gradient, then dy *= m / n in place (the
// gradient that flows through both x W^T and the LoRA branch).
void adapter_backward_scale(const EncoderWeights& w, const EncoderWeights& g,
                            const LayerActivations& la, int64_t l, AdapterSite s, TensorView dy) {
  const EncoderAdapters& ad = w.adapters;
  if (!ad.any() || !ad.dora || !ad.at(l, s).defined()) return;
  const int i = static_cast<int>(s);
  dora_output_backward(g.adapters.at(l, s).magnitude, dy, la.dora_z[i].prefix(dy.shape),
                       ad.at(l, s).magnitude, ad.norm[l][i]);
}

// After the frozen layer's backward: the LoRA branch's gradients; its input gradient is added to
// dx (skipped when dx is undefined).
void adapter_backward(const EncoderWeights& w, const EncoderWeights& g, const LayerActivations& la,
                      const EncoderActivations& a, int64_t l, AdapterSite s, TensorView dy,
                      TensorView x, TensorView dx, const DropoutPlan& d, int64_t T) {
  const EncoderAdapters& ad = w.adapters;
  if (!ad.any() || !ad.at(l, s).defined()) return;
  const AdapterWeights& aw = ad.at(l, s);
  const AdapterWeights& ag = g.adapters.at(l, s);
  const int64_t N = x.dim(0);
  lora_backward(dx, ag.a, ag.b, a.lora_h.prefix({N, ad.r}), dy, x,
                la.lora_u[static_cast<int>(s)].prefix({N, ad.r}), aw.a, aw.b, ad.scale,
                /*accumulate_dinp=*/true, lora_dropout(ad, a, d, T, l, s));
}

// One transformer layer: x (N, C) -> la.out. recompute: checkpointing's second pass.
void layer_forward(const EncoderConfig& c, const EncoderWeights& w, LayerActivations& la,
                   const EncoderActivations& a, int64_t l, TensorView x, const EncoderInputs& in,
                   const DropoutPlan& d, bool recompute = false) {
  const int64_t B = in.B, T = in.T, N = B * T, C = c.hidden_size, F = c.intermediate_size;
  const int H = static_cast<int>(c.num_heads);
  const float eps = c.layer_norm_eps;
  const Shape NC{N, C}, N1{N};
  const LayerWeights& lw = w.layers[l];
  TensorView mask = in.mask.prefix(Shape{B, T});
  TensorView qkv = la.qkv.prefix({N, 3 * C}), ctx = la.ctx.prefix(NC), attn = la.attn.prefix(NC);
  TensorView ln1 = la.ln1.prefix(NC), ffn_pre = la.ffn_pre.prefix({N, F}),
             ffn_act = la.ffn_act.prefix({N, F});
  TensorView ffn_out = la.ffn_out.prefix(NC), out = la.out.prefix(NC);

  // One fused QKV GEMM, unless DoRA adapts all three blocks (each then forms its own z).
  const bool qkv_fused = !(has_dora(w, l, AdapterSite::Query) && has_dora(w, l, AdapterSite::Key) &&
                           has_dora(w, l, AdapterSite::Value));
  if (qkv_fused) linear_forward(qkv, x, lw.qkv_w, lw.qkv_b);
  for (int part = 0; part < 3; ++part)
    adapter_forward(w, la, a, l, qkv_site(part), columns(qkv, part * C, C), x, d, T, qkv_fused,
                    recompute);
  attention_forward(ctx.reshape({B, T, C}), la.probs.prefix({B, H, T, T}),
                    qkv.reshape({B, T, 3 * C}), mask, H, dropout_p(d, c.attention_dropout),
                    key(d, attention_probs_site(l)), a.workspace, rows(d, T));
  adapter_forward(w, la, a, l, AdapterSite::AttnOut, attn, ctx, d, T, /*y_has_base=*/false,
                  recompute);
  dropout_forward(attn, attn, dropout_p(d, c.hidden_dropout), key(d, attention_output_site(l)),
                  rows(d, T));
  add_layer_norm_forward(ln1, la.sum1.prefix(NC), la.ln1_mean.prefix(N1), la.ln1_rstd.prefix(N1),
                         attn, x, lw.ln1_w, lw.ln1_b, eps);
  adapter_forward(w, la, a, l, AdapterSite::FfnIn, ffn_pre, ln1, d, T, /*y_has_base=*/false,
                  recompute);
  gelu_forward(ffn_act, ffn_pre, c.activation);
  adapter_forward(w, la, a, l, AdapterSite::FfnOut, ffn_out, ffn_act, d, T, /*y_has_base=*/false,
                  recompute);
  dropout_forward(ffn_out, ffn_out, dropout_p(d, c.hidden_dropout), key(d, ffn_output_site(l)),
                  rows(d, T));
  add_layer_norm_forward(out, la.sum2.prefix(NC), la.ln2_mean.prefix(N1), la.ln2_rstd.prefix(N1),
                         ffn_out, ln1, lw.ln2_w, lw.ln2_b, eps);
}

// One layer's backward: a.grad_out holds dL/d(out); on return it holds dL/dx (when need_dx).
void layer_backward(const EncoderConfig& c, const EncoderWeights& w, const EncoderWeights& g,
                    const LayerActivations& la, EncoderActivations& a, int64_t l, TensorView x,
                    bool need_dx, const EncoderInputs& in, const DropoutPlan& d) {
  const int64_t B = in.B, T = in.T, N = B * T, C = c.hidden_size, F = c.intermediate_size;
  const int H = static_cast<int>(c.num_heads);
  const Shape NC{N, C}, N1{N};
  // grad_out holds dL/d(output of the current layer); grad_sum, grad_tmp, grad_ctx are scratch.
  TensorView dout = a.grad_out.prefix(NC), dsum = a.grad_sum.prefix(NC),
             dtmp = a.grad_tmp.prefix(NC);
  TensorView dctx = a.grad_ctx.prefix(NC), dffn = a.grad_ffn.prefix({N, F}),
             dqkv = a.grad_qkv.prefix({N, 3 * C});
  TensorView mask = in.mask.prefix(Shape{B, T});
  const LayerWeights& lw = w.layers[l];
  const LayerWeights& lg = g.layers[l];
  const TensorView ln1 = la.ln1.prefix(NC), ffn_act = la.ffn_act.prefix({N, F}),
                   ctx = la.ctx.prefix(NC);

  // out = LayerNorm(f + h1): dsum is the gradient of both f and (through the residual) h1.
  layer_norm_backward(dsum, lg.ln2_w, lg.ln2_b, dout, la.sum2.prefix(NC), lw.ln2_w,
                      la.ln2_mean.prefix(N1), la.ln2_rstd.prefix(N1), a.workspace);
  dropout_backward(dtmp, dsum, dropout_p(d, c.hidden_dropout), key(d, ffn_output_site(l)),
                   rows(d, T));
  adapter_backward_scale(w, g, la, l, AdapterSite::FfnOut, dtmp);
  linear_backward(dffn, lg.ffn_out_w, lg.ffn_out_b, dtmp, ffn_act, lw.ffn_out_w);
  adapter_backward(w, g, la, a, l, AdapterSite::FfnOut, dtmp, ffn_act, dffn, d, T);
  gelu_backward(dffn, la.ffn_pre.prefix({N, F}), dffn, c.activation);
  adapter_backward_scale(w, g, la, l, AdapterSite::FfnIn, dffn);
  // dh1 = residual part (already in dsum) + the FFN input gradient, added in place.
  linear_backward(dsum, lg.ffn_in_w, lg.ffn_in_b, dffn, ln1, lw.ffn_in_w,
                  /*accumulate_dinp=*/true);
  adapter_backward(w, g, la, a, l, AdapterSite::FfnIn, dffn, ln1, dsum, d, T);

  // h1 = LayerNorm(a + x): dout becomes the gradient of both a and (residual) x.
  layer_norm_backward(dout, lg.ln1_w, lg.ln1_b, dsum, la.sum1.prefix(NC), lw.ln1_w,
                      la.ln1_mean.prefix(N1), la.ln1_rstd.prefix(N1), a.workspace);
  dropout_backward(dtmp, dout, dropout_p(d, c.hidden_dropout), key(d, attention_output_site(l)),
                   rows(d, T));
  adapter_backward_scale(w, g, la, l, AdapterSite::AttnOut, dtmp);
  linear_backward(dctx, lg.attn_out_w, lg.attn_out_b, dtmp, ctx, lw.attn_out_w);
  adapter_backward(w, g, la, a, l, AdapterSite::AttnOut, dtmp, ctx, dctx, d, T);
  attention_backward(dqkv.reshape({B, T, 3 * C}), dctx.reshape({B, T, C}),
                     la.qkv.prefix({N, 3 * C}).reshape({B, T, 3 * C}),
                     la.probs.prefix({B, H, T, T}), mask, H, dropout_p(d, c.attention_dropout),
                     key(d, attention_probs_site(l)), a.workspace, rows(d, T));
  for (int part = 0; part < 3; ++part)
    adapter_backward_scale(w, g, la, l, qkv_site(part), columns(dqkv, part * C, C));
  // dx = residual part (in dout) + the QKV input gradient: the previous layer's output gradient.
  const TensorView dx = need_dx ? dout : TensorView();
  if (dx.defined() || lg.qkv_w.defined() || lg.qkv_b.defined())
    linear_backward(dx, lg.qkv_w, lg.qkv_b, dqkv, x, lw.qkv_w, /*accumulate_dinp=*/true);
  for (int part = 0; part < 3; ++part)
    adapter_backward(w, g, la, a, l, qkv_site(part), columns(dqkv, part * C, C), x, dx, d, T);
}

}  // namespace

void add_encoder_params(const EncoderConfig& c, ParamTable& t) {
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  const std::string e = c.weight_prefix() + ".embeddings.";
  t.add(e + "word_embeddings.weight", {c.vocab_size, C});
  t.add(e + "position_embeddings.weight", {c.max_position_embeddings, C});
  t.add(e + "token_type_embeddings.weight", {c.type_vocab_size, C});
  t.add(e + "LayerNorm.weight", {C});
  t.add(e + "LayerNorm.bias", {C});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = layer_prefix(c, l);
    // query, key and value back to back: together they are the fused (3C, C) QKV matrix.
    t.add(p + "attention.self.query.weight", {C, C});
    t.add(p + "attention.self.key.weight", {C, C});
    t.add(p + "attention.self.value.weight", {C, C});
    t.add(p + "attention.self.query.bias", {C});
    t.add(p + "attention.self.key.bias", {C});
    t.add(p + "attention.self.value.bias", {C});
    t.add(p + "attention.output.dense.weight", {C, C});
    t.add(p + "attention.output.dense.bias", {C});
    t.add(p + "attention.output.LayerNorm.weight", {C});
    t.add(p + "attention.output.LayerNorm.bias", {C});
    t.add(p + "intermediate.dense.weight", {F, C});
    t.add(p + "intermediate.dense.bias", {F});
    t.add(p + "output.dense.weight", {C, F});
    t.add(p + "output.dense.bias", {C});
    t.add(p + "output.LayerNorm.weight", {C});
    t.add(p + "output.LayerNorm.bias", {C});
  }
}

EncoderWeights bind_encoder_weights(const EncoderConfig& c, const ParamTable& t, TensorView flat) {
  const int64_t C = c.hidden_size;
  auto get = [&](const std::string& name) { return ParamTable::slice(flat, t.at(name)); };
  const std::string e = c.weight_prefix() + ".embeddings.";
  EncoderWeights w;
  w.word = get(e + "word_embeddings.weight");
  w.position = get(e + "position_embeddings.weight");
  w.token_type = get(e + "token_type_embeddings.weight");
  w.emb_ln_w = get(e + "LayerNorm.weight");
  w.emb_ln_b = get(e + "LayerNorm.bias");
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = layer_prefix(c, l);
    LayerWeights lw;
    lw.qkv_w = t.span(flat, p + "attention.self.query.weight", {3 * C, C});
    lw.qkv_b = t.span(flat, p + "attention.self.query.bias", {3 * C});
    lw.attn_out_w = get(p + "attention.output.dense.weight");
    lw.attn_out_b = get(p + "attention.output.dense.bias");
    lw.ln1_w = get(p + "attention.output.LayerNorm.weight");
    lw.ln1_b = get(p + "attention.output.LayerNorm.bias");
    lw.ffn_in_w = get(p + "intermediate.dense.weight");
    lw.ffn_in_b = get(p + "intermediate.dense.bias");
    lw.ffn_out_w = get(p + "output.dense.weight");
    lw.ffn_out_b = get(p + "output.dense.bias");
    lw.ln2_w = get(p + "output.LayerNorm.weight");
    lw.ln2_b = get(p + "output.LayerNorm.bias");
    w.layers.push_back(lw);
  }
  return w;
}

void plan_encoder_activations(const EncoderConfig& c, int64_t max_batch, int64_t max_seq,
                              bool training, ArenaPlan& plan, const EncoderTraining& how) {
  const int64_t N = max_batch * max_seq, C = c.hidden_size, F = c.intermediate_size,
                H = c.num_heads;
  const DType f32 = DType::F32;
  const bool ckpt = training && how.checkpointing == GradientCheckpointing::On;
  plan.add("act/emb/sum", f32, {N, C});
  plan.add("act/emb/mean", f32, {N});
  plan.add("act/emb/rstd", f32, {N});
  plan.add("act/emb/out", f32, {N, C});
  // Training keeps every layer (with checkpointing: every layer's output, the rest in one slot);
  // inference alternates two slots (a layer reads the other's output).
  const int64_t slots = ckpt ? 1 : training ? c.num_layers : std::min<int64_t>(2, c.num_layers);
  const std::array<bool, kAdapterSites> sites = adapted_sites(c, how.adapters);
  for (int64_t s = 0; s < slots; ++s) {
    plan.add(act_name(s, "qkv"), f32, {N, 3 * C});
    plan.add(act_name(s, "probs"), f32, {max_batch, H, max_seq, max_seq});
    plan.add(act_name(s, "ctx"), f32, {N, C});
    plan.add(act_name(s, "attn"), f32, {N, C});
    plan.add(act_name(s, "sum1"), f32, {N, C});
    plan.add(act_name(s, "ln1"), f32, {N, C});
    plan.add(act_name(s, "ln1_mean"), f32, {N});
    plan.add(act_name(s, "ln1_rstd"), f32, {N});
    plan.add(act_name(s, "ffn_pre"), f32, {N, F});
    plan.add(act_name(s, "ffn_act"), f32, {N, F});
    plan.add(act_name(s, "ffn_out"), f32, {N, C});
    plan.add(act_name(s, "sum2"), f32, {N, C});
    if (!ckpt) plan.add(act_name(s, "out"), f32, {N, C});
    plan.add(act_name(s, "ln2_mean"), f32, {N});
    plan.add(act_name(s, "ln2_rstd"), f32, {N});
    for (int i = 0; i < kAdapterSites; ++i) {
      if (!sites[i]) continue;
      plan.add(act_name(s, fmt::format("lora_u{}", i).c_str()), f32, {N, how.adapters.r});
      if (how.adapters.dora())
        plan.add(act_name(s, fmt::format("dora_z{}", i).c_str()), f32,
                 {N, adapter_out_features(c, static_cast<AdapterSite>(i))});
    }
  }
  if (ckpt)
    for (int64_t l = 0; l < c.num_layers; ++l) plan.add(act_name(l, "out"), f32, {N, C});
  if (training) {
    plan.add("gradact/out", f32, {N, C});
    plan.add("gradact/sum", f32, {N, C});
    plan.add("gradact/tmp", f32, {N, C});
    plan.add("gradact/ctx", f32, {N, C});
    plan.add("gradact/ffn", f32, {N, F});
    plan.add("gradact/qkv", f32, {N, 3 * C});
    if (how.adapters.enabled()) plan.add("gradact/lora_h", f32, {N, how.adapters.r});
  }
  if (how.adapters.enabled() && how.adapters.dropout > 0)
    plan.add("work/lora_dropout", f32, {N, std::max(C, F)});
  const int64_t ws =
      std::max(attention_workspace(max_seq, c.head_dim()), layer_norm_backward_workspace(C));
  plan.add("work/encoder", f32, {ws});
}

EncoderActivations bind_encoder_activations(const EncoderConfig& c, const Arena& arena,
                                            bool training, const EncoderTraining& how) {
  EncoderActivations a;
  const bool ckpt = training && how.checkpointing == GradientCheckpointing::On;
  a.checkpointing = ckpt;
  a.emb_sum = arena.view("act/emb/sum");
  a.emb_mean = arena.view("act/emb/mean");
  a.emb_rstd = arena.view("act/emb/rstd");
  a.emb_out = arena.view("act/emb/out");
  const int64_t slots = ckpt ? 1 : training ? c.num_layers : std::min<int64_t>(2, c.num_layers);
  const std::array<bool, kAdapterSites> sites = adapted_sites(c, how.adapters);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const int64_t s = l % slots;
    LayerActivations la;
    la.qkv = arena.view(act_name(s, "qkv"));
    la.probs = arena.view(act_name(s, "probs"));
    la.ctx = arena.view(act_name(s, "ctx"));
    la.attn = arena.view(act_name(s, "attn"));
    la.sum1 = arena.view(act_name(s, "sum1"));
    la.ln1 = arena.view(act_name(s, "ln1"));
    la.ln1_mean = arena.view(act_name(s, "ln1_mean"));
    la.ln1_rstd = arena.view(act_name(s, "ln1_rstd"));
    la.ffn_pre = arena.view(act_name(s, "ffn_pre"));
    la.ffn_act = arena.view(act_name(s, "ffn_act"));
    la.ffn_out = arena.view(act_name(s, "ffn_out"));
    la.sum2 = arena.view(act_name(s, "sum2"));
    la.out = arena.view(act_name(ckpt ? l : s, "out"));
    la.ln2_mean = arena.view(act_name(s, "ln2_mean"));
    la.ln2_rstd = arena.view(act_name(s, "ln2_rstd"));
    for (int i = 0; i < kAdapterSites; ++i) {
      if (!sites[i]) continue;
      la.lora_u[i] = arena.view(act_name(s, fmt::format("lora_u{}", i).c_str()));
      if (how.adapters.dora())
        la.dora_z[i] = arena.view(act_name(s, fmt::format("dora_z{}", i).c_str()));
    }
    a.layers.push_back(la);
  }
  if (training) {
    a.grad_out = arena.view("gradact/out");
    a.grad_sum = arena.view("gradact/sum");
    a.grad_tmp = arena.view("gradact/tmp");
    a.grad_ctx = arena.view("gradact/ctx");
    a.grad_ffn = arena.view("gradact/ffn");
    a.grad_qkv = arena.view("gradact/qkv");
    if (how.adapters.enabled()) a.lora_h = arena.view("gradact/lora_h");
  }
  if (how.adapters.enabled() && how.adapters.dropout > 0)
    a.lora_scratch = arena.view("work/lora_dropout");
  a.workspace = arena.view("work/encoder");
  return a;
}

TensorView encoder_forward(const EncoderConfig& c, const EncoderWeights& w, EncoderActivations& a,
                           const EncoderInputs& in, const DropoutPlan& d) {
  const int64_t B = in.B, T = in.T, N = B * T, C = c.hidden_size;
  const float eps = c.layer_norm_eps;
  const Shape NC{N, C}, N1{N};

  // Embeddings, summed in HF's order: (word + token_type) + position.
  TensorView emb_sum = a.emb_sum.prefix(NC), emb_out = a.emb_out.prefix(NC);
  embedding_forward(emb_sum, in.ids, w.word, false);
  embedding_forward(emb_sum, in.type_ids, w.token_type, true);
  embedding_forward(emb_sum, in.pos_ids, w.position, true);
  layer_norm_forward(emb_out, a.emb_mean.prefix(N1), a.emb_rstd.prefix(N1), emb_sum, w.emb_ln_w,
                     w.emb_ln_b, eps);
  dropout_forward(emb_out, emb_out, dropout_p(d, c.hidden_dropout),
                  key(d, embedding_dropout_site()), rows(d, T));

  TensorView x = emb_out;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    layer_forward(c, w, a.layers[l], a, l, x, in, d);
    x = a.layers[l].out.prefix(NC);
  }
  return x.reshape({B, T, C});
}

void encoder_backward(const EncoderConfig& c, const EncoderWeights& w, const EncoderWeights& g,
                      EncoderActivations& a, const EncoderInputs& in, const DropoutPlan& d) {
  const int64_t N = in.B * in.T, C = c.hidden_size;
  const Shape NC{N, C}, N1{N};
  // Frozen embeddings (adapters): nothing below layer 0 needs a gradient.
  const bool embeddings_train = g.word.defined() || g.emb_ln_w.defined();
  for (int64_t l = c.num_layers - 1; l >= 0; --l) {
    const TensorView x = l > 0 ? a.layers[l - 1].out.prefix(NC) : a.emb_out.prefix(NC);
    // Checkpointing: the slot holds the last layer's activations after forward; recompute the
    // others (same inputs, same Philox keys: the same bits).
    if (a.checkpointing && l != c.num_layers - 1)
      layer_forward(c, w, a.layers[l], a, l, x, in, d, /*recompute=*/true);
    layer_backward(c, w, g, a.layers[l], a, l, x, l > 0 || embeddings_train, in, d);
  }
  if (!embeddings_train) return;

  // Embeddings: dropout, LayerNorm, then the three tables' sparse gradients.
  TensorView dout = a.grad_out.prefix(NC), dsum = a.grad_sum.prefix(NC);
  dropout_backward(dout, dout, dropout_p(d, c.hidden_dropout), key(d, embedding_dropout_site()),
                   rows(d, in.T));
  layer_norm_backward(dsum, g.emb_ln_w, g.emb_ln_b, dout, a.emb_sum.prefix(NC), w.emb_ln_w,
                      a.emb_mean.prefix(N1), a.emb_rstd.prefix(N1), a.workspace);
  // HF's word embeddings (and RoBERTa's positions) are nn.Embedding(padding_idx=pad_token_id).
  if (g.word.defined()) embedding_backward(g.word, dsum, in.ids, c.pad_token_id);
  if (g.token_type.defined()) embedding_backward(g.token_type, dsum, in.type_ids);
  if (g.position.defined())
    embedding_backward(g.position, dsum, in.pos_ids, c.roberta_like() ? c.pad_token_id : -1);
}

}  // namespace ftune
