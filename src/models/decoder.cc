// Decoder forward and backward passes (see decoder.h for the equations and the gradient rule).
#include "models/decoder.h"

#include "core/memory.h"
#include "core/tensor_columns.h"
#include "models/adapter_site.h"
#include "models/adapters.h"
#include "ops/attention.h"
#include "ops/embedding.h"
#include "ops/glu.h"
#include "ops/last_token.h"
#include "ops/linear.h"
#include "ops/residual.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"

namespace ftune {
namespace {

// Philox sites: attention probabilities per layer (adapter dropout has its own, adapters.h).
uint32_t probs_site(int64_t layer) {
  return static_cast<uint32_t>(1 + layer);
}

AttentionCall attention_call(const DecoderConfig& c, const DecoderActs& a, const TokenInputs& in,
                             const DropoutPlan& d, int64_t l) {
  AttentionCall call;
  call.spec = decoder_attention_spec(c, l);
  if (in.packed())
    call.rows = {in.B, in.max_len, in.cu_seqlens, {}};
  else
    call.rows = {in.B, in.T, {}, in.mask.prefix(Shape{in.B, in.T})};
  call.dropout_p = d.training ? c.attention_dropout : 0.0f;
  call.rng = RngKey{d.seed, probs_site(l), d.offset, d.micro};
  call.place = dropout_rows(d, in);
  call.workspace = a.workspace;
  return call;
}

// The pieces of one layer a pass works on, cut to the batch's N tokens.
struct Layer {
  const DecoderConfig& c;
  const DecoderWeights& w;
  const DecoderWeights* g;  // gradients (backward only)
  const DecoderLayerActs& la;
  const DecoderActs& a;
  int64_t l, N;
  const TokenInputs& in;
  const DropoutPlan& d;

  // The output columns of site s in the fused GEMM's output y (q / k / v of qkv, gate / up of gu).
  TensorView block(DecoderSite s, const TensorView& y) const {
    const int64_t Q = c.q_size(), KV = c.kv_size(), F = c.intermediate_size;
    switch (s) {
      case DecoderSite::Q: return columns(y, 0, Q);
      case DecoderSite::K: return columns(y, Q, KV);
      case DecoderSite::V: return columns(y, Q + KV, KV);
      case DecoderSite::Gate: return columns(y, 0, F);
      case DecoderSite::Up: return columns(y, F, F);
      default: return y;
    }
  }
  // The frozen weight rows (or bias) of site s.
  TensorView site_param(const DecoderLayerWeights& lw, DecoderSite s, bool bias) const {
    const int64_t Q = c.q_size(), KV = c.kv_size(), F = c.intermediate_size;
    const TensorView qkv = bias ? lw.qkv_b : lw.qkv_w, gu = bias ? lw.gu_b : lw.gu_w;
    auto rows = [](const TensorView& v, int64_t b, int64_t e) { return v.defined() ? v.slice0(b, e) : v; };
    switch (s) {
      case DecoderSite::Q: return rows(qkv, 0, Q);
      case DecoderSite::K: return rows(qkv, Q, Q + KV);
      case DecoderSite::V: return rows(qkv, Q + KV, Q + 2 * KV);
      case DecoderSite::O: return bias ? lw.o_b : lw.o_w;
      case DecoderSite::Gate: return rows(gu, 0, F);
      case DecoderSite::Up: return rows(gu, F, 2 * F);
      case DecoderSite::Down: return bias ? lw.down_b : lw.down_w;
    }
    return {};
  }
  bool adapted(DecoderSite s) const {
    return w.adapters.any() && w.adapters.at(l, static_cast<int>(s)).defined();
  }
  bool dora(DecoderSite s) const { return adapted(s) && w.adapters.dora; }
  AdapterSiteRun run(DecoderSite s) const {
    const AdapterSet& ad = w.adapters;
    const int i = static_cast<int>(s);
    AdapterSiteRun r;
    r.w = ad.at(l, i);
    if (g) r.g = g->adapters.at(l, i);
    r.dora = ad.dora;
    r.scale = ad.scale;
    r.weight = r.gemm_weight = site_param(w.layers[l], s, false);
    r.bias = site_param(w.layers[l], s, true);
    if (ad.dora) {
      r.weight_sq = ad.weight_sq[l][i];
      r.norm = ad.norm[l][i];
      r.norm_workspace = ad.norm_workspace;
    }
    r.u = la.lora_u[i];
    r.z = la.dora_z[i];
    r.h = a.lora_h;
    r.dropout.p = d.training ? ad.dropout : 0.0f;
    r.dropout.rng = RngKey{d.seed, adapter_dropout_site(l, i), d.offset, d.micro};
    r.dropout.rows = dropout_rows(d, in);
    r.dropout.scratch = a.lora_scratch;
    return r;
  }
  // y (already holding the frozen result when y_has_base) += the adapter of s, if any.
  void adapter(DecoderSite s, TensorView y, TensorView x, bool y_has_base) const {
    if (adapted(s)) adapter_site_forward(run(s), y, x, x, y_has_base, false);
    else if (!y_has_base) linear_forward(y, x, site_param(w.layers[l], s, false), site_param(w.layers[l], s, true));
  }
  void adapter_scale(DecoderSite s, TensorView dy) const {
    if (dora(s)) adapter_site_backward_scale(run(s), dy);
  }
  void adapter_back(DecoderSite s, TensorView dy, TensorView x, TensorView dx) const {
    if (adapted(s)) adapter_site_backward(run(s), dy, x, dx);
  }
};

void layer_forward(const Layer& L, TensorView x) {
  const DecoderConfig& c = L.c;
  const DecoderLayerWeights& lw = L.w.layers[L.l];
  const DecoderLayerActs& la = L.la;
  const int64_t N = L.N, C = c.hidden_size, F = c.intermediate_size;
  const TensorView h1 = la.h1.prefix({N, C}), qkv = la.qkv.prefix({N, c.qkv_size()});
  const TensorView raw = la.qkv_raw.prefix({N, c.qkv_size()});
  rms_norm_forward(h1, la.rstd1.prefix({N}), x, lw.in_norm, c.rms_norm_eps, c.norm_offset);
  linear_forward(raw, h1, lw.qkv_w, lw.qkv_b);
  for (DecoderSite s : {DecoderSite::Q, DecoderSite::K, DecoderSite::V})
    L.adapter(s, L.block(s, raw), h1, true);
  if (c.qk_norm) {  // per head, from the raw projections into qkv (v stays in raw)
    rms_norm_forward(L.block(DecoderSite::Q, qkv), la.rstd_q.prefix({N * c.num_heads}),
                     L.block(DecoderSite::Q, raw), lw.q_norm, c.rms_norm_eps, c.norm_offset,
                     c.num_heads);
    rms_norm_forward(L.block(DecoderSite::K, qkv), la.rstd_k.prefix({N * c.num_kv_heads}),
                     L.block(DecoderSite::K, raw), lw.k_norm, c.rms_norm_eps, c.norm_offset,
                     c.num_kv_heads);
  }
  const float scaling = c.rope.attention_scaling();
  rope_forward(L.block(DecoderSite::Q, qkv), L.in.pos_ids.prefix({N}), L.a.inv_freq, c.num_heads, scaling);
  rope_forward(L.block(DecoderSite::K, qkv), L.in.pos_ids.prefix({N}), L.a.inv_freq, c.num_kv_heads,
               scaling);
  const TensorView ctx = la.ctx.prefix({N, c.q_size()}), tmp = L.a.tmp.prefix({N, C});
  attention_forward(attention_call(c, L.a, L.in, L.d, L.l), ctx, la.probs,
                    L.block(DecoderSite::Q, qkv), L.block(DecoderSite::K, qkv),
                    L.block(DecoderSite::V, raw));
  L.adapter(DecoderSite::O, tmp, ctx, false);
  const TensorView x1 = la.x1.prefix({N, C}), h2 = la.h2.prefix({N, C});
  residual_forward(x1, x, tmp);
  rms_norm_forward(h2, la.rstd2.prefix({N}), x1, lw.post_norm, c.rms_norm_eps, c.norm_offset);
  const TensorView gu = la.gu.prefix({N, 2 * F}), m = la.m.prefix({N, F});
  linear_forward(gu, h2, lw.gu_w, lw.gu_b);
  for (DecoderSite s : {DecoderSite::Gate, DecoderSite::Up}) L.adapter(s, L.block(s, gu), h2, true);
  glu_forward(m, gu, c.activation);
  L.adapter(DecoderSite::Down, tmp, m, false);
  residual_forward(la.out.prefix({N, C}), x1, tmp);
}

// a.dx holds dL/d(layer output); on return dL/d(layer input) x.
void layer_backward(const Layer& L, TensorView x) {
  const DecoderConfig& c = L.c;
  const DecoderLayerWeights& lw = L.w.layers[L.l];
  const DecoderLayerWeights& lg = L.g->layers[L.l];
  const DecoderLayerActs& la = L.la;
  const DecoderActs& a = L.a;
  const int64_t N = L.N, C = c.hidden_size, F = c.intermediate_size;
  const TensorView dx = a.dx.prefix({N, C}), dtmp = a.dtmp.prefix({N, C}), dh = a.dh.prefix({N, C});
  // DoRA scales its output gradient in place: give it a copy, the residual needs dx as it is.
  auto output_grad = [&](DecoderSite s) {
    if (!L.dora(s)) return dx;
    copy(dtmp, dx);
    L.adapter_scale(s, dtmp);
    return dtmp;
  };
  const TensorView m = la.m.prefix({N, F}), dm = a.dm.prefix({N, F}), gu = la.gu.prefix({N, 2 * F});
  const TensorView dgu = a.dgu.prefix({N, 2 * F}), h2 = la.h2.prefix({N, C});
  TensorView dy = output_grad(DecoderSite::Down);
  linear_backward(dm, lg.down_w, lg.down_b, dy, m, lw.down_w);
  L.adapter_back(DecoderSite::Down, dy, m, dm);
  glu_backward(dgu, gu, dm, c.activation);
  for (DecoderSite s : {DecoderSite::Gate, DecoderSite::Up}) L.adapter_scale(s, L.block(s, dgu));
  linear_backward(dh, lg.gu_w, lg.gu_b, dgu, h2, lw.gu_w);
  for (DecoderSite s : {DecoderSite::Gate, DecoderSite::Up}) L.adapter_back(s, L.block(s, dgu), h2, dh);
  const TensorView x1 = la.x1.prefix({N, C});
  rms_norm_backward(dtmp, lg.post_norm, dh, x1, lw.post_norm, la.rstd2.prefix({N}), c.norm_offset,
                    a.workspace);
  residual_forward(dx, dx, dtmp);  // dL/dx1

  const TensorView ctx = la.ctx.prefix({N, c.q_size()}), dctx = a.dctx.prefix({N, c.q_size()});
  dy = output_grad(DecoderSite::O);
  linear_backward(dctx, lg.o_w, lg.o_b, dy, ctx, lw.o_w);
  L.adapter_back(DecoderSite::O, dy, ctx, dctx);
  const TensorView qkv = la.qkv.prefix({N, c.qkv_size()}), dqkv = a.dqkv.prefix({N, c.qkv_size()});
  attention_backward(attention_call(c, a, L.in, L.d, L.l), L.block(DecoderSite::Q, dqkv),
                     L.block(DecoderSite::K, dqkv), L.block(DecoderSite::V, dqkv), dctx,
                     L.block(DecoderSite::Q, qkv), L.block(DecoderSite::K, qkv),
                     L.block(DecoderSite::V, la.qkv_raw.prefix({N, c.qkv_size()})), ctx, la.probs);
  const float scaling = c.rope.attention_scaling();
  rope_backward(L.block(DecoderSite::Q, dqkv), L.in.pos_ids.prefix({N}), a.inv_freq, c.num_heads, scaling);
  rope_backward(L.block(DecoderSite::K, dqkv), L.in.pos_ids.prefix({N}), a.inv_freq, c.num_kv_heads,
                scaling);
  if (c.qk_norm) {  // in place: the gradients of the raw q and k projections
    const TensorView raw = la.qkv_raw.prefix({N, c.qkv_size()});
    rms_norm_backward(L.block(DecoderSite::Q, dqkv), lg.q_norm, L.block(DecoderSite::Q, dqkv),
                      L.block(DecoderSite::Q, raw), lw.q_norm, la.rstd_q.prefix({N * c.num_heads}),
                      c.norm_offset, a.workspace, c.num_heads);
    rms_norm_backward(L.block(DecoderSite::K, dqkv), lg.k_norm, L.block(DecoderSite::K, dqkv),
                      L.block(DecoderSite::K, raw), lw.k_norm,
                      la.rstd_k.prefix({N * c.num_kv_heads}), c.norm_offset, a.workspace,
                      c.num_kv_heads);
  }
  for (DecoderSite s : {DecoderSite::Q, DecoderSite::K, DecoderSite::V}) L.adapter_scale(s, L.block(s, dqkv));
  const TensorView h1 = la.h1.prefix({N, C});
  linear_backward(dh, lg.qkv_w, lg.qkv_b, dqkv, h1, lw.qkv_w);
  for (DecoderSite s : {DecoderSite::Q, DecoderSite::K, DecoderSite::V})
    L.adapter_back(s, L.block(s, dqkv), h1, dh);
  rms_norm_backward(dtmp, lg.in_norm, dh, x, lw.in_norm, la.rstd1.prefix({N}), c.norm_offset,
                    a.workspace);
  residual_forward(dx, dx, dtmp);  // dL/dx
}

LastTokenRows pool_rows(const TokenInputs& in) {
  LastTokenRows r;
  r.B = in.B;
  r.T = in.T;
  if (in.packed()) r.cu_seqlens = in.cu_seqlens;
  return r;
}

TensorView layer_input(const DecoderActs& a, int64_t l, int64_t N, int64_t C) {
  return (l == 0 ? a.x0 : a.layers[l - 1].out).prefix({N, C});
}

}  // namespace

TensorView decoder_forward(const DecoderConfig& c, const DecoderWeights& w, DecoderActs& a,
                           const TokenInputs& in, const DropoutPlan& dropout) {
  const DropoutPlan& d = dropout;  // a packed micro-batch's place is read by the kernels too
  const int64_t N = in.tokens(), C = c.hidden_size, B = in.B;
  embedding_forward(a.x0.prefix({N, C}), in.ids.prefix({N}), w.embed, false);
  for (int64_t l = 0; l < c.num_layers; ++l)
    layer_forward(Layer{c, w, nullptr, a.layers[l], a, l, N, in, d}, layer_input(a, l, N, C));
  const TensorView hidden = a.hidden.prefix({N, C});
  rms_norm_forward(hidden, a.final_rstd.prefix({N}), layer_input(a, c.num_layers, N, C),
                   w.final_norm, c.rms_norm_eps, c.norm_offset);
  last_token_forward(a.pooled.prefix({B, C}), a.pool_index.prefix({B}), hidden, in.ids.prefix({N}),
                     pool_rows(in), c.pad_token_id);
  const TensorView logits = a.logits.prefix({B, c.num_labels()});
  linear_forward(logits, a.pooled.prefix({B, C}), w.score, TensorView());
  return logits;
}

void decoder_backward(const DecoderConfig& c, const DecoderWeights& w, const DecoderWeights& g,
                      DecoderActs& a, TensorView dlogits, const TokenInputs& in,
                      const DropoutPlan& dropout) {
  const DropoutPlan& d = dropout;  // a packed micro-batch's place is read by the kernels too
  const int64_t N = in.tokens(), C = c.hidden_size, B = in.B;
  const TensorView dpooled = a.dpooled.prefix({B, C}), dh = a.dh.prefix({N, C});
  linear_backward(dpooled, g.score, TensorView(), dlogits, a.pooled.prefix({B, C}), w.score);
  last_token_backward(dh, dpooled, a.pool_index.prefix({B}));
  rms_norm_backward(a.dx.prefix({N, C}), g.final_norm, dh, layer_input(a, c.num_layers, N, C),
                    w.final_norm, a.final_rstd.prefix({N}), c.norm_offset, a.workspace);
  for (int64_t l = c.num_layers - 1; l >= 0; --l)
    layer_backward(Layer{c, w, &g, a.layers[l], a, l, N, in, d}, layer_input(a, l, N, C));
  if (g.embed.defined())
    embedding_backward(g.embed, a.dx.prefix({N, C}), in.ids.prefix({N}), c.embedding_padding_idx,
                       a.workspace);
}

}  // namespace ftune
