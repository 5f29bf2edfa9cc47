// Decoder forward and backward passes (see decoder.h for the equations and the gradient rule).
#include "models/decoder/decoder.h"

#include "core/error.h"
#include "core/memory.h"
#include "core/tensor_columns.h"
#include "models/adapters.h"
#include "models/layers/layer_stack.h"
#include "models/layers/adapted_linear.h"
#include "models/layers/feed_forward.h"
#include "models/layers/fused_linear.h"
#include "models/layers/norm.h"
#include "models/token_attention.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/embedding.h"
#include "ops/last_token.h"
#include "ops/linear.h"
#include "ops/residual.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/scale.h"

namespace ftune {
namespace {

// Philox sites: attention probabilities per layer (adapter dropout has its own, adapters.h).
uint32_t probs_site(int64_t layer) {
  return static_cast<uint32_t>(1 + layer);
}

AttentionCall attention_call(const DecoderConfig& c, const DecoderActs& a, const TokenInputs& in,
                             const DropoutPlan& d, int64_t l) {
  return token_attention_call(decoder_attention_spec(c, l), in, d,
                              d.training ? c.attention_dropout : 0.0f, probs_site(l), a.workspace);
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
  bool recompute = false;  // checkpointing's second forward (DoRA keeps its norms)

  bool mixed() const { return a.compute != DType::F32; }
  // The weights a GEMM reads: the 16-bit shadow under mixed precision, else the fp32 ones.
  const DecoderLayerWeights& gemm() const { return w.shadow.empty() ? w.layers[l] : w.shadow[l]; }
  // An fp32 (rows, cols) staging matrix of the layer pass (mixed precision).
  TensorView stage(const TensorView& buf, int64_t cols) const {
    return buf.flat_range(0, N * cols).reshape({N, cols});
  }

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
  // The layer's RoPE inverse frequencies (Gemma 3's sliding layers have their own) and scaling.
  TensorView inv_freq() const {
    if (c.uses_local_rope[l]) return a.inv_freq_local;
    // HF's longrope switches to its long factors when the batch's positions pass the original
    // length: positions run 0..T-1 over padded rows, and to the longest sequence when packed.
    return c.rope.uses_long_factors(in.packed() ? in.max_len : in.T) ? a.inv_freq_long : a.inv_freq;
  }
  float rope_scaling() const { return c.layer_rope(l).attention_scaling(); }
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
  // Site s as an adapted linear block (models/layers/adapted_linear.h): rows of a fused matrix
  // for q / k / v and gate / up; the GEMM reads the 16-bit shadow (weight and bias) under mixed
  // precision.
  AdaptedLinear site(DecoderSite s) const {
    const int i = static_cast<int>(s);
    const DecoderLayerWeights& lw = w.layers[l];
    LinearParams p{site_param(lw, s, false), site_param(lw, s, true),
                   site_param(gemm(), s, false), site_param(gemm(), s, true), {}, {}};
    if (g) p.weight_grad = site_param(g->layers[l], s, false), p.bias_grad = site_param(g->layers[l], s, true);
    const AdapterPass pass{&w.adapters, g ? &g->adapters : nullptr, a.adapter_scratch, d};
    return AdaptedLinear(p, pass,
                         AdapterSlot{l, i, la.adapter[i], adapter_dropout_site(l, i),
                                     dropout_rows(d, in)});
  }
  // The plain linear over a fused matrix (q | k | v or gate | up), its adapters being the row
  // blocks' sites.
  AdaptedLinear fused_gemm(TensorView DecoderLayerWeights::*weight,
                           TensorView DecoderLayerWeights::*bias) const {
    const DecoderLayerWeights& lw = w.layers[l];
    LinearParams p{lw.*weight, lw.*bias, gemm().*weight, gemm().*bias, {}, {}};
    if (g) p.weight_grad = g->layers[l].*weight, p.bias_grad = g->layers[l].*bias;
    return AdaptedLinear(p);
  }
  // The q | k | v projection: one GEMM, an adapted block per row block
  // (models/layers/fused_linear.h).
  FusedLinear qkv_proj() const {
    const int64_t Q = c.q_size(), KV = c.kv_size();
    return FusedLinear(fused_gemm(&DecoderLayerWeights::qkv_w, &DecoderLayerWeights::qkv_b),
                       {FusedBlock{0, Q, site(DecoderSite::Q)},
                        FusedBlock{Q, KV, site(DecoderSite::K)},
                        FusedBlock{Q + KV, KV, site(DecoderSite::V)}},
                       FusedLinear::AllDora::RunFusedGemm);
  }
  // The gated MLP: gate | up as one GEMM with adapted row blocks, the gated activation, down
  // (models/layers/feed_forward.h).
  FeedForward mlp() const {
    const int64_t F = c.intermediate_size;
    return FeedForward(
        FusedLinear(fused_gemm(&DecoderLayerWeights::gu_w, &DecoderLayerWeights::gu_b),
                    {FusedBlock{0, F, site(DecoderSite::Gate)},
                     FusedBlock{F, F, site(DecoderSite::Up)}},
                    FusedLinear::AllDora::RunFusedGemm),
        site(DecoderSite::Down), FeedForwardActivation::Gated(c.activation));
  }
  // An RMSNorm of the layer (models/layers/norm.h): fp32 x into out directly, or under mixed
  // precision in fp32 staging (norm_stage) rounded once into the 16-bit out.
  Norm norm(TensorView DecoderLayerWeights::*weight) const {
    return Norm::rms(w.layers[l].*weight, g ? g->layers[l].*weight : TensorView(), c.rms_norm_eps,
                     c.norm_offset, a.workspace);
  }
  TensorView norm_stage() const { return mixed() ? a.stage0 : TensorView(); }
  // y (already holding the frozen result when y_has_base) += the adapter of s, if any.
  void adapter(DecoderSite s, TensorView y, TensorView x, bool y_has_base) const {
    site(s).forward(y, x, x, y_has_base, recompute);
  }
};


// q and k: the q / k norms (Qwen3) from the raw projections and RoPE, into qkv. Under mixed
// precision on fp32 copies of the 16-bit projections, rounded once into qkv.
void qk_forward(const Layer& L, TensorView qkv, TensorView raw) {
  const DecoderConfig& c = L.c;
  const DecoderLayerWeights& lw = L.w.layers[L.l];
  const DecoderLayerActs& la = L.la;
  const int64_t N = L.N, QK = c.q_size() + c.kv_size();
  const TensorView qk = L.mixed() ? L.stage(L.a.stage0, QK) : columns(qkv, 0, QK);
  TensorView qk_raw = columns(raw, 0, QK);
  if (L.mixed()) {
    const TensorView raw32 = c.qk_norm ? L.stage(L.a.stage1, QK) : qk;
    cast(raw32, qk_raw);
    qk_raw = raw32;
  }
  if (c.qk_norm) {  // per head, from the raw projections (v stays in raw)
    rms_norm_forward(columns(qk, 0, c.q_size()), la.rstd_q.prefix({N * c.num_heads}),
                     columns(qk_raw, 0, c.q_size()), lw.q_norm, c.rms_norm_eps, c.norm_offset,
                     c.num_heads);
    rms_norm_forward(columns(qk, c.q_size(), c.kv_size()), la.rstd_k.prefix({N * c.num_kv_heads}),
                     columns(qk_raw, c.q_size(), c.kv_size()), lw.k_norm, c.rms_norm_eps,
                     c.norm_offset, c.num_kv_heads);
  }
  const float scaling = L.rope_scaling();
  const TensorView pos = L.in.pos_ids.prefix({N});
  rope_forward(columns(qk, 0, c.q_size()), pos, L.inv_freq(), c.num_heads, scaling);
  rope_forward(columns(qk, c.q_size(), c.kv_size()), pos, L.inv_freq(), c.num_kv_heads, scaling);
  if (L.mixed()) cast(columns(qkv, 0, QK), qk);
}

void layer_forward(const Layer& L, TensorView x) {
  const DecoderConfig& c = L.c;
  const DecoderLayerWeights& lw = L.w.layers[L.l];
  const DecoderLayerActs& la = L.la;
  const int64_t N = L.N, C = c.hidden_size, F = c.intermediate_size;
  const TensorView h1 = la.h1.prefix({N, C}), qkv = la.qkv.prefix({N, c.qkv_size()});
  const TensorView raw = la.qkv_raw.prefix({N, c.qkv_size()});
  L.norm(&DecoderLayerWeights::in_norm).forward(h1, TensorView(), la.rstd1.prefix({N}), x,
                                                L.norm_stage());
  L.qkv_proj().forward(raw, h1, h1, L.recompute);
  qk_forward(L, qkv, raw);
  const TensorView ctx = la.ctx.prefix({N, c.q_size()}), tmp = L.a.tmp.prefix({N, C});
  attention_forward(attention_call(c, L.a, L.in, L.d, L.l), ctx, la.probs,
                    L.block(DecoderSite::Q, qkv), L.block(DecoderSite::K, qkv),
                    L.block(DecoderSite::V, raw));
  // A branch's output GEMM (attention's o, the MLP's down) writes where branch_out reads it: tmp,
  // or with Gemma's sandwich norms in fp32 the kept `saved`.
  auto branch_target = [&](TensorView saved) {
    return c.sandwich_norms && !L.mixed() ? saved.prefix({N, C}) : tmp;
  };
  // The branch's output to add to the residual stream. Gemma normalises it first (sandwich
  // norms), keeping the GEMM output in fp32 `saved` for backward: under mixed precision the GEMM
  // writes 16 bits (as autocast's linear does), copied to `saved`, and the norm writes fp32
  // staging.
  auto branch_out = [&](TensorView written, TensorView saved, TensorView rstd,
                        TensorView w) -> TensorView {
    if (!c.sandwich_norms) return written;
    const TensorView y = saved.prefix({N, C});
    if (L.mixed()) cast(y, written);
    const TensorView normed = L.mixed() ? L.stage(L.a.stage0, C) : tmp;
    rms_norm_forward(normed, rstd.prefix({N}), y, w, c.rms_norm_eps, c.norm_offset);
    return normed;
  };
  const TensorView attn_y = branch_target(la.attn_out);
  L.adapter(DecoderSite::O, attn_y, ctx, false);
  const TensorView attn = branch_out(attn_y, la.attn_out, la.rstd_ao, lw.attn_out_norm);
  const TensorView x1 = la.x1.prefix({N, C}), h2 = la.h2.prefix({N, C});
  residual_forward(x1, x, attn);
  L.norm(&DecoderLayerWeights::post_norm).forward(h2, TensorView(), la.rstd2.prefix({N}), x1,
                                                  L.norm_stage());
  const TensorView gu = la.gu.prefix({N, 2 * F}), m = la.m.prefix({N, F});
  // Mixed precision: 16-bit gu and m, the gate's activation in fp32 math (ops/glu.h).
  const TensorView mlp_y = branch_target(la.mlp_out);
  L.mlp().forward(mlp_y, m, gu, h2, h2, L.recompute);
  const TensorView mlp = branch_out(mlp_y, la.mlp_out, la.rstd_mo, lw.mlp_out_norm);
  residual_forward(la.out.prefix({N, C}), x1, mlp);
}

// The gradient of q and k before RoPE and the q / k norms, in place in dqkv (mixed precision: on
// an fp32 copy, rounded once back).
void qk_backward(const Layer& L, TensorView dqkv) {
  const DecoderConfig& c = L.c;
  const DecoderLayerWeights& lw = L.w.layers[L.l];
  const DecoderLayerWeights& lg = L.g->layers[L.l];
  const DecoderLayerActs& la = L.la;
  const int64_t N = L.N, Q = c.q_size(), KV = c.kv_size();
  const TensorView dqk = L.mixed() ? L.stage(L.a.stage0, Q + KV) : columns(dqkv, 0, Q + KV);
  if (L.mixed()) cast(dqk, columns(dqkv, 0, Q + KV));
  const float scaling = L.rope_scaling();
  const TensorView pos = L.in.pos_ids.prefix({N});
  rope_backward(columns(dqk, 0, Q), pos, L.inv_freq(), c.num_heads, scaling);
  rope_backward(columns(dqk, Q, KV), pos, L.inv_freq(), c.num_kv_heads, scaling);
  if (c.qk_norm) {  // in place: the gradients of the raw q and k projections
    TensorView raw = columns(la.qkv_raw.prefix({N, c.qkv_size()}), 0, Q + KV);
    if (L.mixed()) {
      cast(L.stage(L.a.stage1, Q + KV), raw);
      raw = L.stage(L.a.stage1, Q + KV);
    }
    rms_norm_backward(columns(dqk, 0, Q), lg.q_norm, columns(dqk, 0, Q), columns(raw, 0, Q),
                      lw.q_norm, la.rstd_q.prefix({N * c.num_heads}), c.norm_offset,
                      L.a.workspace, c.num_heads);
    rms_norm_backward(columns(dqk, Q, KV), lg.k_norm, columns(dqk, Q, KV), columns(raw, Q, KV),
                      lw.k_norm, la.rstd_k.prefix({N * c.num_kv_heads}), c.norm_offset,
                      L.a.workspace, c.num_kv_heads);
  }
  if (L.mixed()) cast(columns(dqkv, 0, Q + KV), dqk);
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
  // The gradient a sublayer's output GEMM reads (site s): dx, or through Gemma's norm on the branch
  // output (saved, rstd, weight w, its gradient gnorm); a copy (mixed precision: in 16 bits) when
  // DoRA will scale it in place in the site's backward (the residual needs dx as it is).
  auto output_grad = [&](DecoderSite s, TensorView saved, TensorView rstd, TensorView w,
                         TensorView gnorm) {
    TensorView g = dx;
    if (c.sandwich_norms) {
      rms_norm_backward(dtmp, gnorm, dx, saved.prefix({N, C}), w, rstd.prefix({N}), c.norm_offset,
                        a.workspace);
      g = dtmp;
    }
    if (!L.site(s).dora() && !L.mixed()) return g;
    TensorView dy = g;
    if (L.mixed()) {
      dy = a.dy_h.prefix({N, C});
      cast(dy, g);
    } else if (g.data == dx.data) {
      dy = dtmp;
      copy(dy, dx);
    }
    return dy;
  };
  const TensorView m = la.m.prefix({N, F}), dm = a.dm.prefix({N, F}), gu = la.gu.prefix({N, 2 * F});
  const TensorView dgu = a.dgu.prefix({N, 2 * F}), h2 = la.h2.prefix({N, C});
  TensorView dy = output_grad(DecoderSite::Down, la.mlp_out, la.rstd_mo, lw.mlp_out_norm, lg.mlp_out_norm);
  L.mlp().backward(dy, m, dm, gu, dgu, h2, h2, dh);  // mixed: 16-bit gu and dgu, fp32 dm
  const TensorView x1 = la.x1.prefix({N, C});
  L.norm(&DecoderLayerWeights::post_norm).backward(dtmp, dh, x1, TensorView(), la.rstd2.prefix({N}));
  residual_forward(dx, dx, dtmp);  // dL/dx1

  const TensorView ctx = la.ctx.prefix({N, c.q_size()}), dctx = a.dctx.prefix({N, c.q_size()});
  dy = output_grad(DecoderSite::O, la.attn_out, la.rstd_ao, lw.attn_out_norm, lg.attn_out_norm);
  L.site(DecoderSite::O).backward(dy, ctx, ctx, dctx);
  const TensorView qkv = la.qkv.prefix({N, c.qkv_size()}), dqkv = a.dqkv.prefix({N, c.qkv_size()});
  attention_backward(attention_call(c, a, L.in, L.d, L.l), L.block(DecoderSite::Q, dqkv),
                     L.block(DecoderSite::K, dqkv), L.block(DecoderSite::V, dqkv), dctx,
                     L.block(DecoderSite::Q, qkv), L.block(DecoderSite::K, qkv),
                     L.block(DecoderSite::V, la.qkv_raw.prefix({N, c.qkv_size()})), ctx, la.probs);
  qk_backward(L, dqkv);
  const TensorView h1 = la.h1.prefix({N, C});
  L.qkv_proj().backward(dqkv, h1, h1, dh);
  L.norm(&DecoderLayerWeights::in_norm).backward(dtmp, dh, x, TensorView(), la.rstd1.prefix({N}));
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
  if (a.compute != DType::F32 && w.shadow.size() != static_cast<size_t>(c.num_layers))
    throw InternalError("mixed-precision decoder without its weight shadow");
  embedding_forward(a.x0.prefix({N, C}), in.ids.prefix({N}), w.embed, false);
  if (c.embed_scale != 1.0f) scale_inplace(a.x0.prefix({N, C}), c.embed_scale);
  for (int64_t l = 0; l < c.num_layers; ++l)
    layer_forward(Layer{c, w, nullptr, a.layers[l], a, l, N, in, d}, layer_input(a, l, N, C));
  const TensorView hidden = a.hidden.prefix({N, C});
  Norm::rms(w.final_norm, TensorView(), c.rms_norm_eps, c.norm_offset, a.workspace)
      .forward(hidden, TensorView(), a.final_rstd.prefix({N}), layer_input(a, c.num_layers, N, C));
  if (c.causal_lm) return hidden;
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
  TensorView dh = a.dh.prefix({N, C});
  if (c.causal_lm) {
    dh = dlogits;  // the hidden states' gradient (N, C)
  } else {
    const TensorView dpooled = a.dpooled.prefix({B, C});
    linear_backward(dpooled, g.score, TensorView(), dlogits, a.pooled.prefix({B, C}), w.score);
    last_token_backward(dh, dpooled, a.pool_index.prefix({B}));
  }
  Norm::rms(w.final_norm, g.final_norm, c.rms_norm_eps, c.norm_offset, a.workspace)
      .backward(a.dx.prefix({N, C}), dh, layer_input(a, c.num_layers, N, C), TensorView(),
                a.final_rstd.prefix({N}));
  layer_stack_backward(
      c.num_layers, a.checkpointing,
      [&](int64_t l) {
        layer_forward(Layer{c, w, nullptr, a.layers[l], a, l, N, in, d, true},
                      layer_input(a, l, N, C));
      },
      [&](int64_t l) {
        layer_backward(Layer{c, w, &g, a.layers[l], a, l, N, in, d}, layer_input(a, l, N, C));
      });
  if (!g.embed.defined()) return;
  if (c.embed_scale != 1.0f) scale_inplace(a.dx.prefix({N, C}), c.embed_scale);
  embedding_backward(g.embed, a.dx.prefix({N, C}), in.ids.prefix({N}), c.embedding_padding_idx,
                     a.workspace);
}

}  // namespace ftune
