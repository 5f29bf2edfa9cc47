// Encoder forward and backward passes (see encoder.h for the equations and the gradient rule).
#include "models/encoder.h"

#include <fmt/format.h>

#include "ops/attention.h"
#include "ops/attention_cudnn.h"
#include "ops/cast.h"
#include "ops/dropout.h"
#include "ops/dropout_add_norm.h"
#include "ops/embedding.h"
#include "ops/layer_norm.h"
#include "ops/linear.h"
#include "models/adapter_site.h"
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
  return RngKey{d.seed, site, d.offset, d.micro};
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

// BERT's attention: equal heads, bidirectional, scale 1/sqrt(D), no window or soft-cap.
AttentionSpec attention_spec(const EncoderConfig& c) {
  AttentionSpec s;
  s.heads = s.kv_heads = c.num_heads;
  s.head_dim = c.head_dim();
  s.scale = default_attention_scale(s.head_dim);
  return s;
}

// Layer l's attention call: padded rows with the key mask, the run's kernel (one channel:
// EncoderTraining::attention), the layer's probability-dropout stream.
AttentionCall attention_call(const EncoderConfig& c, const EncoderActivations& a,
                             const EncoderInputs& in, const DropoutPlan& d, int64_t l) {
  AttentionCall call;
  call.spec = attention_spec(c);
  call.rows = {in.B, in.T, {}, in.mask.prefix(Shape{in.B, in.T})};
  call.dropout_p = dropout_p(d, c.attention_dropout);
  call.rng = key(d, attention_probs_site(l));
  call.place = rows(d, in.T);
  call.kernel = a.cudnn_attention ? AttentionKernel::Cudnn : AttentionKernel::Ftune;
  call.workspace = a.workspace;
  return call;
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

// The weight matrix (or bias) a GEMM reads: the 16-bit shadow under mixed precision, else the
// fp32 one.
TensorView gemm_weight(const EncoderWeights& w, int64_t l, TensorView LayerWeights::*m) {
  return w.shadow.empty() ? w.layers[l].*m : w.shadow[l].*m;
}

// The bias a 16-bit GEMM output adds: the bias's 16-bit shadow under mixed precision (what
// autocast adds, and what cuBLASLt fuses into a 16-bit output), else the fp32 bias.
TensorView site_gemm_bias(const EncoderWeights& w, int64_t l, AdapterSite s) {
  if (w.shadow.empty()) return adapted_bias(w, l, s);
  switch (s) {
    case AdapterSite::AttnOut:
      return w.shadow[l].attn_out_b;
    case AdapterSite::FfnIn:
      return w.shadow[l].ffn_in_b;
    case AdapterSite::FfnOut:
      return w.shadow[l].ffn_out_b;
    default:
      break;
  }
  const int64_t C = w.shadow[l].qkv_w.dim(1), part = static_cast<int64_t>(s);
  return w.shadow[l].qkv_b.slice0(part * C, (part + 1) * C);
}

TensorView site_gemm_weight(const EncoderWeights& w, int64_t l, AdapterSite s) {
  if (w.shadow.empty()) return adapted_weight(w, l, s);
  switch (s) {
    case AdapterSite::AttnOut:
      return w.shadow[l].attn_out_w;
    case AdapterSite::FfnIn:
      return w.shadow[l].ffn_in_w;
    case AdapterSite::FfnOut:
      return w.shadow[l].ffn_out_w;
    default:
      break;
  }
  // DoRA on all of query, key and value: each block's own GEMM, on its rows of the fused shadow.
  const int64_t C = w.shadow[l].qkv_w.dim(1), part = static_cast<int64_t>(s);
  return w.shadow[l].qkv_w.slice0(part * C, (part + 1) * C);
}

bool has_dora(const EncoderWeights& w, int64_t l, AdapterSite s) {
  return w.adapters.any() && w.adapters.dora && w.adapters.at(l, s).defined();
}

// The adapter of (l, s) as models/adapter_site.h runs it; g: the gradients (backward only).
AdapterSiteRun site_run(const EncoderWeights& w, const EncoderWeights* g,
                        const LayerActivations& la, const EncoderActivations& a, int64_t l,
                        AdapterSite s, const DropoutPlan& d, int64_t T) {
  const EncoderAdapters& ad = w.adapters;
  const int i = static_cast<int>(s);
  AdapterSiteRun r;
  r.w = ad.at(l, s);
  if (g) r.g = g->adapters.at(l, s);
  r.dora = ad.dora;
  r.scale = ad.scale;
  r.weight = adapted_weight(w, l, s);
  r.bias = adapted_bias(w, l, s);
  r.gemm_weight = site_gemm_weight(w, l, s);
  if (ad.dora) {
    r.weight_sq = ad.weight_sq[l][i];
    r.norm = ad.norm[l][i];
    r.norm_workspace = ad.norm_workspace;
  }
  r.u = la.lora_u[i];
  r.z = la.dora_z[i];
  r.h = a.lora_h;
  r.stage_x = a.lora_stage_x;
  r.stage_y = a.lora_stage_y;
  r.stage_dx = a.lora_stage_dx;
  r.dropout = lora_dropout(ad, a, d, T, l, s);
  return r;
}

bool adapted(const EncoderWeights& w, int64_t l, AdapterSite s) {
  return w.adapters.any() && w.adapters.at(l, s).defined();
}

// The frozen linear of (l, s) with its adapter, if any, into y (N, out). x: the adapter's input;
// xg: the frozen GEMM's (x itself, except for query / key / value under mixed precision, where x
// is the fp32 layer input and xg its 16-bit copy). y_has_base: y already holds the frozen
// x W^T + b (the fused QKV GEMM ran); otherwise this computes it.
void adapter_forward(const EncoderWeights& w, LayerActivations& la, const EncoderActivations& a,
                     int64_t l, AdapterSite s, TensorView y, TensorView x, TensorView xg,
                     const DropoutPlan& d, int64_t T, bool y_has_base, bool recompute) {
  if (adapted(w, l, s))
    adapter_site_forward(site_run(w, nullptr, la, a, l, s, d, T), y, x, xg, y_has_base, recompute);
  else if (!y_has_base)
    linear_forward(y, xg, site_gemm_weight(w, l, s), site_gemm_bias(w, l, s));
}

// Before the frozen layer's backward: DoRA's magnitude gradient and the gradient the frozen
// layer reads (models/adapter_site.h).
void adapter_backward_scale(const EncoderWeights& w, const EncoderWeights& g,
                            const LayerActivations& la, const EncoderActivations& a, int64_t l,
                            AdapterSite s, TensorView dy, const DropoutPlan& d, int64_t T) {
  if (has_dora(w, l, s)) adapter_site_backward_scale(site_run(w, &g, la, a, l, s, d, T), dy);
}

// After the frozen layer's backward: the adapter's gradients; its input gradient is added to dx
// (skipped when dx is undefined).
void adapter_backward(const EncoderWeights& w, const EncoderWeights& g, const LayerActivations& la,
                      const EncoderActivations& a, int64_t l, AdapterSite s, TensorView dy,
                      TensorView x, TensorView dx, const DropoutPlan& d, int64_t T) {
  if (adapted(w, l, s)) adapter_site_backward(site_run(w, &g, la, a, l, s, d, T), dy, x, dx);
}

// One transformer layer: x (N, C) -> la.out; x_h: x's 16-bit copy under mixed precision (the
// GEMM's input), else undefined. recompute: checkpointing's second pass.
void layer_forward(const EncoderConfig& c, const EncoderWeights& w, LayerActivations& la,
                   const EncoderActivations& a, int64_t l, TensorView x, TensorView x_h,
                   const EncoderInputs& in, const DropoutPlan& d, bool recompute = false) {
  const int64_t B = in.B, T = in.T, N = B * T, C = c.hidden_size, F = c.intermediate_size;
  const float eps = c.layer_norm_eps;
  const Shape NC{N, C}, N1{N};
  const LayerWeights& lw = w.layers[l];
  TensorView qkv = la.qkv.prefix({N, 3 * C}), ctx = la.ctx.prefix(NC), attn = la.attn.prefix(NC);
  TensorView ln1 = la.ln1.prefix(NC), ffn_pre = la.ffn_pre.prefix({N, F}),
             ffn_act = la.ffn_act.prefix({N, F});
  TensorView ffn_out = la.ffn_out.prefix(NC), out = la.out.prefix(NC);
  const bool mixed = a.compute != DType::F32;
  const TensorView xg = mixed ? x_h : x;  // what the QKV GEMM reads
  const TensorView ln1_h = mixed ? la.ln1_h.prefix(NC) : TensorView();
  const TensorView out_h = mixed ? la.out_h.prefix(NC) : TensorView();

  // One fused QKV GEMM, unless DoRA adapts all three blocks (each then forms its own z).
  const bool qkv_fused = !(has_dora(w, l, AdapterSite::Query) && has_dora(w, l, AdapterSite::Key) &&
                           has_dora(w, l, AdapterSite::Value));
  if (qkv_fused)
    linear_forward(qkv, xg, gemm_weight(w, l, &LayerWeights::qkv_w),
                   gemm_weight(w, l, &LayerWeights::qkv_b));
  for (int part = 0; part < 3; ++part)
    adapter_forward(w, la, a, l, qkv_site(part), columns(qkv, part * C, C), x, xg, d, T,
                    qkv_fused, recompute);
  attention_forward(attention_call(c, a, in, d, l), ctx, la.probs, columns(qkv, 0, C),
                    columns(qkv, C, C), columns(qkv, 2 * C, C));
  adapter_forward(w, la, a, l, AdapterSite::AttnOut, attn, ctx, ctx, d, T, /*y_has_base=*/false,
                  recompute);
  // LayerNorm(dropout(attn) + x) in one pass (ops/dropout_add_norm.h; attn is not modified):
  // under mixed precision the 16-bit sublayer output is added to the fp32 stream (autocast's
  // promotion), normalised in fp32, and copied to 16 bits for the next GEMM (ln1_h).
  dropout_add_layer_norm_forward(ln1, ln1_h, la.sum1.prefix(NC), la.ln1_mean.prefix(N1),
                                 la.ln1_rstd.prefix(N1), attn, x, lw.ln1_w, lw.ln1_b, eps,
                                 dropout_p(d, c.hidden_dropout), key(d, attention_output_site(l)),
                                 rows(d, T));
  adapter_forward(w, la, a, l, AdapterSite::FfnIn, ffn_pre, mixed ? ln1_h : ln1,
                  mixed ? ln1_h : ln1, d, T, /*y_has_base=*/false, recompute);
  gelu_forward(ffn_act, ffn_pre, c.activation);
  adapter_forward(w, la, a, l, AdapterSite::FfnOut, ffn_out, ffn_act, ffn_act, d, T,
                  /*y_has_base=*/false, recompute);
  dropout_add_layer_norm_forward(out, out_h, la.sum2.prefix(NC), la.ln2_mean.prefix(N1),
                                 la.ln2_rstd.prefix(N1), ffn_out, ln1, lw.ln2_w, lw.ln2_b, eps,
                                 dropout_p(d, c.hidden_dropout), key(d, ffn_output_site(l)),
                                 rows(d, T));
}

// One layer's backward: a.grad_out holds dL/d(out); on return it holds dL/dx (when need_dx).
// x_h: as in layer_forward.
void layer_backward(const EncoderConfig& c, const EncoderWeights& w, const EncoderWeights& g,
                    const LayerActivations& la, EncoderActivations& a, int64_t l, TensorView x,
                    TensorView x_h, bool need_dx, const EncoderInputs& in, const DropoutPlan& d) {
  const int64_t B = in.B, T = in.T, N = B * T, C = c.hidden_size, F = c.intermediate_size;
  const Shape NC{N, C}, N1{N};
  // grad_out holds dL/d(output of the current layer); grad_sum, grad_tmp, grad_ctx are scratch.
  TensorView dout = a.grad_out.prefix(NC), dsum = a.grad_sum.prefix(NC),
             dtmp = a.grad_tmp.prefix(NC);
  TensorView dctx = a.grad_ctx.prefix(NC), dffn = a.grad_ffn.prefix({N, F}),
             dqkv = a.grad_qkv.prefix({N, 3 * C});
  const LayerWeights& lw = w.layers[l];
  const LayerWeights& lg = g.layers[l];
  const bool mixed = a.compute != DType::F32;
  // The GEMMs' inputs: 16-bit copies under mixed precision.
  const TensorView ln1 = (mixed ? la.ln1_h : la.ln1).prefix(NC),
                   ffn_act = la.ffn_act.prefix({N, F}), ctx = la.ctx.prefix(NC);
  const TensorView xg = mixed ? x_h : x;

  // out = LayerNorm(dropout(f) + h1): dsum is the gradient of h1 (through the residual) and of
  // dropout(f); dtmp, f's, is dropout'(dsum), written by the same pass.
  layer_norm_dropout_backward(dsum, dtmp, lg.ln2_w, lg.ln2_b, dout, la.sum2.prefix(NC), lw.ln2_w,
                              la.ln2_mean.prefix(N1), la.ln2_rstd.prefix(N1),
                              dropout_p(d, c.hidden_dropout), key(d, ffn_output_site(l)),
                              rows(d, T));
  adapter_backward_scale(w, g, la, a, l, AdapterSite::FfnOut, dtmp, d, T);
  linear_backward(dffn, lg.ffn_out_w, lg.ffn_out_b, dtmp, ffn_act,
                  gemm_weight(w, l, &LayerWeights::ffn_out_w));
  adapter_backward(w, g, la, a, l, AdapterSite::FfnOut, dtmp, ffn_act, dffn, d, T);
  gelu_backward(dffn, la.ffn_pre.prefix({N, F}), dffn, c.activation);
  adapter_backward_scale(w, g, la, a, l, AdapterSite::FfnIn, dffn, d, T);
  // dh1 = residual part (already in dsum) + the FFN input gradient, added in place.
  linear_backward(dsum, lg.ffn_in_w, lg.ffn_in_b, dffn, ln1,
                  gemm_weight(w, l, &LayerWeights::ffn_in_w), /*accumulate_dinp=*/true);
  adapter_backward(w, g, la, a, l, AdapterSite::FfnIn, dffn, ln1, dsum, d, T);

  // h1 = LayerNorm(dropout(a) + x): dout becomes the gradient of x (residual), dtmp that of a.
  layer_norm_dropout_backward(dout, dtmp, lg.ln1_w, lg.ln1_b, dsum, la.sum1.prefix(NC), lw.ln1_w,
                              la.ln1_mean.prefix(N1), la.ln1_rstd.prefix(N1),
                              dropout_p(d, c.hidden_dropout), key(d, attention_output_site(l)),
                              rows(d, T));
  adapter_backward_scale(w, g, la, a, l, AdapterSite::AttnOut, dtmp, d, T);
  linear_backward(dctx, lg.attn_out_w, lg.attn_out_b, dtmp, ctx,
                  gemm_weight(w, l, &LayerWeights::attn_out_w));
  adapter_backward(w, g, la, a, l, AdapterSite::AttnOut, dtmp, ctx, dctx, d, T);
  const TensorView qkv = la.qkv.prefix({N, 3 * C});
  attention_backward(attention_call(c, a, in, d, l), columns(dqkv, 0, C), columns(dqkv, C, C),
                     columns(dqkv, 2 * C, C), dctx, columns(qkv, 0, C), columns(qkv, C, C),
                     columns(qkv, 2 * C, C), ctx, la.probs);
  for (int part = 0; part < 3; ++part)
    adapter_backward_scale(w, g, la, a, l, qkv_site(part), columns(dqkv, part * C, C), d, T);
  // dx = residual part (in dout) + the QKV input gradient: the previous layer's output gradient.
  const TensorView dx = need_dx ? dout : TensorView();
  if (dx.defined() || lg.qkv_w.defined() || lg.qkv_b.defined())
    linear_backward(dx, lg.qkv_w, lg.qkv_b, dqkv, xg, gemm_weight(w, l, &LayerWeights::qkv_w),
                    /*accumulate_dinp=*/true);
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

namespace {

// Views of the layers' parameters in `flat`, whose element 0 is the parameter at offset `base`.
std::vector<LayerWeights> bind_layers(const EncoderConfig& c, const ParamTable& t, TensorView flat,
                                      int64_t base) {
  const int64_t C = c.hidden_size;
  auto view = [&](const std::string& name, Shape shape) {
    return flat.flat_range(t.at(name).offset - base, shape.numel()).reshape(shape);
  };
  auto get = [&](const std::string& name) { return view(name, t.at(name).shape); };
  std::vector<LayerWeights> layers;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = layer_prefix(c, l);
    LayerWeights lw;
    // query, key and value are consecutive: one (3C, C) matrix and one (3C) bias.
    lw.qkv_w = view(p + "attention.self.query.weight", {3 * C, C});
    lw.qkv_b = view(p + "attention.self.query.bias", {3 * C});
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
    layers.push_back(lw);
  }
  return layers;
}

}  // namespace

EncoderWeights bind_encoder_weights(const EncoderConfig& c, const ParamTable& t, TensorView flat) {
  auto get = [&](const std::string& name) { return ParamTable::slice(flat, t.at(name)); };
  const std::string e = c.weight_prefix() + ".embeddings.";
  EncoderWeights w;
  w.word = get(e + "word_embeddings.weight");
  w.position = get(e + "position_embeddings.weight");
  w.token_type = get(e + "token_type_embeddings.weight");
  w.emb_ln_w = get(e + "LayerNorm.weight");
  w.emb_ln_b = get(e + "LayerNorm.bias");
  w.layers = bind_layers(c, t, flat, 0);
  return w;
}

std::pair<int64_t, int64_t> encoder_layer_range(const EncoderConfig& c, const ParamTable& t) {
  if (c.num_layers == 0) return {0, 0};
  const int64_t begin = t.at(layer_prefix(c, 0) + "attention.self.query.weight").offset;
  const ParamSpec& last = t.at(layer_prefix(c, c.num_layers - 1) + "output.LayerNorm.bias");
  return {begin, last.offset + last.shape.numel() - begin};
}

std::vector<LayerWeights> bind_layer_weights(const EncoderConfig& c, const ParamTable& t,
                                             TensorView flat) {
  const auto [begin, count] = encoder_layer_range(c, t);
  if (flat.numel() != count)
    throw InternalError(
        fmt::format("layer weights: buffer of {} elements for {} parameters", flat.numel(), count));
  return bind_layers(c, t, flat, begin);
}

void plan_encoder_activations(const EncoderConfig& c, int64_t max_batch, int64_t max_seq,
                              bool training, ArenaPlan& plan, const EncoderTraining& how) {
  const int64_t N = max_batch * max_seq, C = c.hidden_size, F = c.intermediate_size;
  const DType f32 = DType::F32;
  // Mixed precision: the GEMMs' inputs and outputs (and their gradients) in the compute type.
  const DType h = how.compute;
  const bool mixed = h != f32;
  const bool ckpt = training && how.checkpointing == GradientCheckpointing::On;
  // cuDNN's flash attention keeps its softmax statistics, not the probabilities.
  const bool cudnn = uses_cudnn_attention(how.attention, how.device, h);
  plan.add("act/emb/sum", f32, {N, C});
  plan.add("act/emb/mean", f32, {N});
  plan.add("act/emb/rstd", f32, {N});
  plan.add("act/emb/out", f32, {N, C});
  if (mixed) plan.add("act/emb/out_h", h, {N, C});
  // Training keeps every layer (with checkpointing: every layer's output, the rest in one slot);
  // inference alternates two slots (a layer reads the other's output).
  const int64_t slots = ckpt ? 1 : training ? c.num_layers : std::min<int64_t>(2, c.num_layers);
  const std::array<bool, kAdapterSites> sites = adapted_sites(c, how.adapters);
  // The op's saved state per layer slot (probabilities, or cuDNN's statistics) and its scratch.
  const AttentionBuffers attention =
      attention_buffers(attention_spec(c), how.device, cudnn, max_batch, N, max_seq, training);
  for (int64_t s = 0; s < slots; ++s) {
    plan.add(act_name(s, "qkv"), h, {N, 3 * C});
    plan.add(act_name(s, "probs"), f32, {attention.saved});
    plan.add(act_name(s, "ctx"), h, {N, C});
    plan.add(act_name(s, "attn"), h, {N, C});
    plan.add(act_name(s, "sum1"), f32, {N, C});
    plan.add(act_name(s, "ln1"), f32, {N, C});
    if (mixed) plan.add(act_name(s, "ln1_h"), h, {N, C});
    plan.add(act_name(s, "ln1_mean"), f32, {N});
    plan.add(act_name(s, "ln1_rstd"), f32, {N});
    plan.add(act_name(s, "ffn_pre"), h, {N, F});
    plan.add(act_name(s, "ffn_act"), h, {N, F});
    plan.add(act_name(s, "ffn_out"), h, {N, C});
    plan.add(act_name(s, "sum2"), f32, {N, C});
    if (!ckpt) plan.add(act_name(s, "out"), f32, {N, C});
    if (!ckpt && mixed) plan.add(act_name(s, "out_h"), h, {N, C});
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
  // Checkpointing keeps only the fp32 layer outputs; their 16-bit copies alternate between two
  // slots (layer l writes slot (l + 1) % 2 and reads slot l % 2), and backward re-casts a layer's
  // input before recomputing it.
  if (ckpt && mixed)
    for (int64_t s = 0; s < std::min<int64_t>(2, c.num_layers); ++s)
      plan.add(fmt::format("act/ckpt/out_h{}", s), h, {N, C});
  if (training) {
    plan.add("gradact/out", f32, {N, C});
    plan.add("gradact/sum", f32, {N, C});
    plan.add("gradact/tmp", h, {N, C});
    plan.add("gradact/ctx", h, {N, C});
    plan.add("gradact/ffn", h, {N, F});
    plan.add("gradact/qkv", h, {N, 3 * C});
    if (how.adapters.enabled()) plan.add("gradact/lora_h", f32, {N, how.adapters.r});
  }
  if (how.adapters.enabled() && how.adapters.dropout > 0)
    plan.add("work/lora_dropout", f32, {N, std::max(C, F)});
  if (mixed && how.adapters.enabled()) {
    // fp32 copies for the LoRA branches: inputs that are 16-bit (attention output, FFN in and out;
    // the QKV input is the fp32 layer input), outputs (all 16-bit), and 16-bit input gradients
    // (attention output: dctx, FFN out: dffn), each as wide as the widest adapted site needs.
    int64_t xw = 0, yw = 0, dxw = 0;
    for (int i = 0; i < kAdapterSites; ++i) {
      if (!sites[i]) continue;
      const AdapterSite site = static_cast<AdapterSite>(i);
      const int64_t in = site == AdapterSite::FfnOut ? F : C;
      if (site == AdapterSite::AttnOut || site == AdapterSite::FfnIn || site == AdapterSite::FfnOut)
        xw = std::max(xw, in);
      yw = std::max(yw, adapter_out_features(c, site));
      if (site == AdapterSite::AttnOut || site == AdapterSite::FfnOut) dxw = std::max(dxw, in);
    }
    if (xw > 0) plan.add("work/lora_stage_x", f32, {N * xw});
    if (yw > 0) plan.add("work/lora_stage_y", f32, {N * yw});
    if (training && dxw > 0) plan.add("work/lora_stage_dx", f32, {N * dxw});
  }
  // Kernel scratch, as the target device's kernels use it: on the CPU per-thread scores and
  // partial sums (compute_threads() of them); on CUDA the attention backward's row sums of every
  // (b, h) pair (ops/attention.h), plus, when 16-bit attention runs through cuDNN, its workspace
  // (ops/attention_cudnn.h). The embeddings' backward reuses it after the layers, sorting the
  // tokens by id there (ops/embedding.h); LayerNorm needs none (a fixed-order column reduction).
  int64_t ws = attention.workspace;
  if (training) ws = std::max(ws, embedding_backward_workspace(how.device, N, C));
  plan.add("work/encoder", f32, {ws});
}

EncoderActivations bind_encoder_activations(const EncoderConfig& c, const Arena& arena,
                                            bool training, const EncoderTraining& how) {
  EncoderActivations a;
  const bool ckpt = training && how.checkpointing == GradientCheckpointing::On;
  a.checkpointing = ckpt;
  a.compute = how.compute;
  a.cudnn_attention = uses_cudnn_attention(how.attention, how.device, how.compute);
  const bool mixed = how.compute != DType::F32;
  if (mixed) a.emb_out_h = arena.view("act/emb/out_h");
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
    if (mixed) {
      la.ln1_h = arena.view(act_name(s, "ln1_h"));
      const int64_t ckpt_slot = (l + 1) % std::min<int64_t>(2, c.num_layers);
      la.out_h = ckpt ? arena.view(fmt::format("act/ckpt/out_h{}", ckpt_slot))
                      : arena.view(act_name(s, "out_h"));
    }
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
  for (auto [name, view] : {std::pair{"work/lora_stage_x", &a.lora_stage_x},
                            std::pair{"work/lora_stage_y", &a.lora_stage_y},
                            std::pair{"work/lora_stage_dx", &a.lora_stage_dx}})
    if (arena.plan().contains(name)) *view = arena.view(name);
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
  const bool mixed = a.compute != DType::F32;
  if (mixed) {
    if (w.shadow.size() != static_cast<size_t>(c.num_layers))
      throw InternalError("mixed-precision encoder without its weight shadow");
    cast(a.emb_out_h.prefix(NC), emb_out);
  }

  TensorView x = emb_out, x_h = mixed ? a.emb_out_h.prefix(NC) : TensorView();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    layer_forward(c, w, a.layers[l], a, l, x, x_h, in, d);
    x = a.layers[l].out.prefix(NC);
    if (mixed) x_h = a.layers[l].out_h.prefix(NC);
  }
  return x.reshape({B, T, C});
}

void encoder_backward(const EncoderConfig& c, const EncoderWeights& w, const EncoderWeights& g,
                      EncoderActivations& a, const EncoderInputs& in, const DropoutPlan& d) {
  const int64_t N = in.B * in.T, C = c.hidden_size;
  const Shape NC{N, C}, N1{N};
  // Frozen embeddings (adapters): nothing below layer 0 needs a gradient.
  const bool embeddings_train = g.word.defined() || g.emb_ln_w.defined();
  const bool mixed = a.compute != DType::F32;
  for (int64_t l = c.num_layers - 1; l >= 0; --l) {
    const TensorView x = l > 0 ? a.layers[l - 1].out.prefix(NC) : a.emb_out.prefix(NC);
    const TensorView x_h = !mixed  ? TensorView()
                           : l > 0 ? a.layers[l - 1].out_h.prefix(NC)
                                   : a.emb_out_h.prefix(NC);
    // Checkpointing: the slot holds the last layer's activations after forward; recompute the
    // others (same inputs, same Philox keys: the same bits). Mixed precision: the input's 16-bit
    // copy is cast again first (its slot was reused; the cast gives the same bits).
    if (a.checkpointing && l != c.num_layers - 1) {
      if (mixed && l > 0) cast(x_h, x);
      layer_forward(c, w, a.layers[l], a, l, x, x_h, in, d, /*recompute=*/true);
    }
    layer_backward(c, w, g, a.layers[l], a, l, x, x_h, l > 0 || embeddings_train, in, d);
  }
  if (!embeddings_train) return;

  // Embeddings: dropout, LayerNorm, then the three tables' sparse gradients.
  TensorView dout = a.grad_out.prefix(NC), dsum = a.grad_sum.prefix(NC);
  dropout_backward(dout, dout, dropout_p(d, c.hidden_dropout), key(d, embedding_dropout_site()),
                   rows(d, in.T));
  layer_norm_backward(dsum, g.emb_ln_w, g.emb_ln_b, dout, a.emb_sum.prefix(NC), w.emb_ln_w,
                      a.emb_mean.prefix(N1), a.emb_rstd.prefix(N1));
  // HF's word embeddings (and RoBERTa's positions) are nn.Embedding(padding_idx=pad_token_id).
  if (g.word.defined()) embedding_backward(g.word, dsum, in.ids, c.pad_token_id, a.workspace);
  if (g.token_type.defined())
    embedding_backward(g.token_type, dsum, in.type_ids, -1, a.workspace);
  if (g.position.defined())
    embedding_backward(g.position, dsum, in.pos_ids, c.roberta_like() ? c.pad_token_id : -1,
                       a.workspace);
}

}  // namespace ftune
