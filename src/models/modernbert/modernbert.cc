// ModernBERT forward and backward passes of the embeddings and layers (see modernbert.h for the
// equations and the gradient rule; the pooling and head are in modernbert_head.cc).
#include "models/modernbert/modernbert.h"

#include "core/error.h"
#include "core/memory.h"
#include "core/tensor_columns.h"
#include "models/adapters.h"
#include "models/layers/layer_stack.h"
#include "models/layers/adapted_linear.h"
#include "models/layers/feed_forward.h"
#include "models/layers/norm.h"
#include "models/token_attention.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/glu.h"
#include "ops/layer_norm.h"
#include "ops/linear.h"
#include "ops/residual.h"
#include "ops/rope.h"

namespace ftune {
namespace {

float rate(const DropoutPlan& d, float p) {
  return d.training ? p : 0.0f;
}

AttentionCall attention_call(const ModernBertConfig& c, const ModernBertActs& a,
                             const TokenInputs& in, const DropoutPlan& d, int64_t l) {
  return token_attention_call(modernbert_attention_spec(c, l), in, d, rate(d, c.attention_dropout),
                              modernbert_probs_site(l), a.workspace);
}

// The pieces of one layer a pass works on, cut to the batch's N tokens.
struct Layer {
  const ModernBertConfig& c;
  const ModernBertWeights& w;
  const ModernBertWeights* g;  // gradients (backward only)
  const ModernBertLayerActs& la;
  const ModernBertActs& a;
  int64_t l, N;
  const TokenInputs& in;
  const DropoutPlan& d;

  const ModernBertLayerWeights& lw() const { return w.layers[l]; }
  bool mixed() const { return a.compute != DType::F32; }
  // An fp32 (rows, cols) staging matrix of the layer pass (mixed precision).
  TensorView stage(const TensorView& buf, int64_t cols) const {
    return buf.flat_range(0, N * cols).reshape({N, cols});
  }
  // Site s's weight: the fp32 master (gemm false) or what its GEMM reads (gemm true: the 16-bit
  // shadow under mixed precision).
  TensorView weight(ModernBertSite s, bool gemm = false) const {
    const ModernBertLayerWeights& lw = gemm && mixed() ? w.shadow[l] : w.layers[l];
    switch (s) {
      case ModernBertSite::Wqkv: return lw.qkv_w;
      case ModernBertSite::AttnWo: return lw.o_w;
      case ModernBertSite::Wi: return lw.wi_w;
      case ModernBertSite::MlpWo: return lw.wo_w;
    }
    return {};
  }
  TensorView bias(ModernBertSite s) const {
    switch (s) {
      case ModernBertSite::Wqkv: return lw().qkv_b;
      case ModernBertSite::AttnWo: return lw().o_b;
      case ModernBertSite::Wi: return lw().wi_b;
      case ModernBertSite::MlpWo: return lw().wo_b;
    }
    return {};
  }
  // Site s as an adapted linear block (models/layers/adapted_linear.h): the GEMM reads the
  // 16-bit shadow under mixed precision and adds the fp32 bias.
  AdaptedLinear site(ModernBertSite s) const {
    const int i = static_cast<int>(s);
    LinearParams p{weight(s), bias(s), weight(s, true), bias(s), {}, {}};
    if (g) {
      const ModernBertLayerWeights& lg = g->layers[l];
      switch (s) {
        case ModernBertSite::Wqkv: p.weight_grad = lg.qkv_w, p.bias_grad = lg.qkv_b; break;
        case ModernBertSite::AttnWo: p.weight_grad = lg.o_w, p.bias_grad = lg.o_b; break;
        case ModernBertSite::Wi: p.weight_grad = lg.wi_w, p.bias_grad = lg.wi_b; break;
        case ModernBertSite::MlpWo: p.weight_grad = lg.wo_w, p.bias_grad = lg.wo_b; break;
      }
    }
    const AdapterPass pass{&w.adapters, g ? &g->adapters : nullptr, a.adapter_scratch, d};
    return AdaptedLinear(p, pass,
                         AdapterSlot{l, i, la.adapter[i], adapter_dropout_site(l, i),
                                     dropout_rows(d, in)});
  }
  // y = x W^T + b of site s, with its adapter if any.
  void linear(ModernBertSite s, TensorView y, TensorView x) const { site(s).forward(y, x); }
  // dx = dy W (and the weight's and adapter's gradients) of site s; dy may be scaled in place by
  // DoRA, so it must not be needed afterwards.
  void linear_back(ModernBertSite s, TensorView dy, TensorView x, TensorView dx) const {
    site(s).backward(dy, x, dx);
  }
  // The MLP: Wi, GeGLU, the mlp dropout (p) on its output, Wo (models/layers/feed_forward.h).
  FeedForward mlp(float p, DropoutRows rows) const {
    return FeedForward(site(ModernBertSite::Wi), site(ModernBertSite::MlpWo),
                       FeedForwardActivation::Gated(c.activation),
                       FeedForwardDropout{p, key(modernbert_mlp_site(l)), rows});
  }
  // A LayerNorm of the layer (models/layers/norm.h): fp32 x into out directly, or under mixed
  // precision in fp32 staging (norm_stage) whose 16-bit copy (the same pass) is out.
  Norm norm(TensorView ModernBertLayerWeights::*weight, TensorView ModernBertLayerWeights::*bias) const {
    return Norm::layer(lw().*weight, lw().*bias, g ? g->layers[l].*weight : TensorView(),
                       g ? g->layers[l].*bias : TensorView(), c.norm_eps);
  }
  TensorView norm_stage() const { return mixed() ? a.stage0 : TensorView(); }
  RngKey key(uint32_t site) const { return RngKey{d.seed, site, d.offset, d.micro}; }
};

// The embeddings' and the final LayerNorm (fp32; g: the gradients, backward only).
Norm emb_norm(const ModernBertConfig& c, const ModernBertWeights& w, const ModernBertWeights* g) {
  return Norm::layer(w.emb_norm_w, w.emb_norm_b, g ? g->emb_norm_w : TensorView(),
                     g ? g->emb_norm_b : TensorView(), c.norm_eps);
}
Norm final_norm(const ModernBertConfig& c, const ModernBertWeights& w, const ModernBertWeights* g) {
  return Norm::layer(w.final_norm_w, w.final_norm_b, g ? g->final_norm_w : TensorView(),
                     g ? g->final_norm_b : TensorView(), c.norm_eps);
}

TensorView layer_input(const ModernBertActs& a, int64_t l, int64_t N, int64_t C) {
  return (l == 0 ? a.x0 : a.layers[l - 1].out).prefix({N, C});
}

// h1 of layer l: x_0 itself on layer 0 (attn_norm is HF's Identity there; mixed precision: its
// 16-bit copy in h1).
TensorView attn_input(const Layer& L, int64_t C) {
  return L.l == 0 && !L.mixed() ? layer_input(L.a, 0, L.N, C) : L.la.h1.prefix({L.N, C});
}


// RoPE on q and k of qkv (backward: on their gradients); mixed precision on fp32 copies, rounded
// once back.
void rope_qk(const Layer& L, TensorView qkv, bool backward) {
  const ModernBertConfig& c = L.c;
  const int64_t C = c.hidden_size;
  const TensorView qk = L.mixed() ? L.stage(L.a.stage0, 2 * C) : columns(qkv, 0, 2 * C);
  if (L.mixed()) cast(qk, columns(qkv, 0, 2 * C));
  const TensorView inv = c.global[L.l] ? L.a.global_inv_freq : L.a.local_inv_freq;
  const TensorView pos = L.in.pos_ids.prefix({L.N});
  for (int64_t part = 0; part < 2; ++part) {
    if (backward) rope_backward(columns(qk, part * C, C), pos, inv, c.num_heads, 1.0f);
    else rope_forward(columns(qk, part * C, C), pos, inv, c.num_heads, 1.0f);
  }
  if (L.mixed()) cast(columns(qkv, 0, 2 * C), qk);
}

// The gradient an output GEMM (attn.Wo / mlp.Wo) reads, from dx (fp32, which the residual still
// needs): through the dropout of p (key), and in a copy when DoRA scales it in place or mixed
// precision needs it in 16 bits.
TensorView output_grad(const Layer& L, ModernBertSite s, float p, uint32_t site) {
  const int64_t C = L.c.hidden_size;
  const TensorView dx = L.a.dx.prefix({L.N, C});
  const TensorView dy = L.mixed() ? L.a.dy_h.prefix({L.N, C}) : L.a.dtmp.prefix({L.N, C});
  if (p > 0) dropout_backward(dy, dx, p, L.key(site), dropout_rows(L.d, L.in));
  else if (L.mixed()) cast(dy, dx);
  else if (L.site(s).dora()) copy(dy, dx);
  else return dx;
  return dy;
}

void layer_forward(const Layer& L, TensorView x) {
  const ModernBertConfig& c = L.c;
  const ModernBertLayerActs& la = L.la;
  const int64_t N = L.N, C = c.hidden_size, F = c.intermediate_size;
  if (L.l > 0)
    L.norm(&ModernBertLayerWeights::attn_norm_w, &ModernBertLayerWeights::attn_norm_b)
        .forward(la.h1.prefix({N, C}), la.mean1.prefix({N}), la.rstd1.prefix({N}), x,
                 L.norm_stage());
  else if (L.mixed())
    cast(la.h1.prefix({N, C}), x);
  const TensorView h1 = attn_input(L, C), qkv = la.qkv.prefix({N, 3 * C});
  L.linear(ModernBertSite::Wqkv, qkv, h1);
  rope_qk(L, qkv, false);
  const TensorView ctx = la.ctx.prefix({N, C}), tmp = L.a.tmp.prefix({N, C});
  attention_forward(attention_call(c, L.a, L.in, L.d, L.l), ctx, la.probs, columns(qkv, 0, C),
                    columns(qkv, C, C), columns(qkv, 2 * C, C));
  L.linear(ModernBertSite::AttnWo, tmp, ctx);
  const DropoutRows rows = dropout_rows(L.d, L.in);
  const float p_attn = rate(L.d, c.attention_dropout), p_mlp = rate(L.d, c.mlp_dropout);
  if (p_attn > 0) dropout_forward(tmp, tmp, p_attn, L.key(modernbert_attn_out_site(L.l)), rows);
  const TensorView x1 = la.x1.prefix({N, C}), h2 = la.h2.prefix({N, C});
  residual_forward(x1, x, tmp);
  L.norm(&ModernBertLayerWeights::mlp_norm_w, &ModernBertLayerWeights::mlp_norm_b)
      .forward(h2, la.mean2.prefix({N}), la.rstd2.prefix({N}), x1, L.norm_stage());
  const TensorView gu = la.gu.prefix({N, 2 * F}), m = la.m.prefix({N, F});
  L.mlp(p_mlp, rows).forward(tmp, m, gu, h2, h2);
  residual_forward(la.out.prefix({N, C}), x1, tmp);
}

// a.dx holds dL/d(layer output); on return dL/d(layer input) x.
void layer_backward(const Layer& L, TensorView x) {
  const ModernBertConfig& c = L.c;
  const ModernBertLayerActs& la = L.la;
  const ModernBertActs& a = L.a;
  const int64_t N = L.N, C = c.hidden_size, F = c.intermediate_size;
  const TensorView dx = a.dx.prefix({N, C}), dtmp = a.dtmp.prefix({N, C}), dh = a.dh.prefix({N, C});
  const DropoutRows rows = dropout_rows(L.d, L.in);
  const float p_attn = rate(L.d, c.attention_dropout), p_mlp = rate(L.d, c.mlp_dropout);

  // MLP. dx (the residual's gradient) must stay: DoRA, which scales its output gradient in
  // place, gets a copy.
  const TensorView m = la.m.prefix({N, F}), dm = a.dm.prefix({N, F});
  const TensorView gu = la.gu.prefix({N, 2 * F}), dgu = a.dgu.prefix({N, 2 * F});
  const TensorView h2 = la.h2.prefix({N, C});
  L.mlp(p_mlp, rows).backward(output_grad(L, ModernBertSite::MlpWo, 0.0f, 0), m, dm, gu, dgu, h2,
                              h2, dh);
  const TensorView x1 = la.x1.prefix({N, C});
  L.norm(&ModernBertLayerWeights::mlp_norm_w, &ModernBertLayerWeights::mlp_norm_b)
      .backward(dtmp, dh, x1, la.mean2.prefix({N}), la.rstd2.prefix({N}));
  residual_forward(dx, dx, dtmp);  // dL/dx1

  // Attention.
  const TensorView ctx = la.ctx.prefix({N, C}), dctx = a.dctx.prefix({N, C});
  L.linear_back(ModernBertSite::AttnWo,
                output_grad(L, ModernBertSite::AttnWo, p_attn, modernbert_attn_out_site(L.l)), ctx,
                dctx);
  const TensorView qkv = la.qkv.prefix({N, 3 * C}), dqkv = a.dqkv.prefix({N, 3 * C});
  attention_backward(attention_call(c, a, L.in, L.d, L.l), columns(dqkv, 0, C), columns(dqkv, C, C),
                     columns(dqkv, 2 * C, C), dctx, columns(qkv, 0, C), columns(qkv, C, C),
                     columns(qkv, 2 * C, C), ctx, la.probs);
  rope_qk(L, dqkv, true);
  const TensorView h1 = attn_input(L, C);
  L.linear_back(ModernBertSite::Wqkv, dqkv, h1, dh);
  if (L.l == 0) {
    residual_forward(dx, dx, dh);  // h1 = x on layer 0
    return;
  }
  L.norm(&ModernBertLayerWeights::attn_norm_w, &ModernBertLayerWeights::attn_norm_b)
      .backward(dtmp, dh, x, la.mean1.prefix({N}), la.rstd1.prefix({N}));
  residual_forward(dx, dx, dtmp);  // dL/dx
}

}  // namespace

TensorView modernbert_forward(const ModernBertConfig& c, const ModernBertWeights& w,
                              ModernBertActs& a, const TokenInputs& in, const DropoutPlan& dropout) {
  const DropoutPlan& d = dropout;  // a packed micro-batch's place is read by the kernels too
  const int64_t N = in.tokens(), C = c.hidden_size;
  if (a.compute != DType::F32 && w.shadow.size() != static_cast<size_t>(c.num_layers))
    throw InternalError("mixed-precision ModernBERT without its weight shadow");
  const TensorView emb = a.emb.prefix({N, C}), x0 = a.x0.prefix({N, C});
  embedding_forward(emb, in.ids.prefix({N}), w.embed, false);
  emb_norm(c, w, nullptr).forward(x0, a.emb_mean.prefix({N}), a.emb_rstd.prefix({N}), emb);
  const float p = rate(d, c.embedding_dropout);
  if (p > 0)
    dropout_forward(x0, x0, p, RngKey{d.seed, modernbert_embedding_site(), d.offset, d.micro},
                    dropout_rows(d, in));
  for (int64_t l = 0; l < c.num_layers; ++l)
    layer_forward(Layer{c, w, nullptr, a.layers[l], a, l, N, in, d}, layer_input(a, l, N, C));
  final_norm(c, w, nullptr)
      .forward(a.hidden.prefix({N, C}), a.final_mean.prefix({N}), a.final_rstd.prefix({N}),
               layer_input(a, c.num_layers, N, C));
  return modernbert_head_forward(c, w, a, in, d);
}

void modernbert_backward(const ModernBertConfig& c, const ModernBertWeights& w,
                         const ModernBertWeights& g, ModernBertActs& a, TensorView dlogits,
                         const TokenInputs& in, const DropoutPlan& dropout) {
  const DropoutPlan& d = dropout;  // a packed micro-batch's place is read by the kernels too
  const int64_t N = in.tokens(), C = c.hidden_size;
  modernbert_head_backward(c, w, g, a, dlogits, in, d);  // -> a.dh: dL/dhidden
  final_norm(c, w, &g).backward(a.dx.prefix({N, C}), a.dh.prefix({N, C}),
                                layer_input(a, c.num_layers, N, C), a.final_mean.prefix({N}),
                                a.final_rstd.prefix({N}));
  layer_stack_backward(
      c.num_layers, a.recompute,
      [&](int64_t l) {
        layer_forward(Layer{c, w, &g, a.layers[l], a, l, N, in, d}, layer_input(a, l, N, C));
      },
      [&](int64_t l) {
        layer_backward(Layer{c, w, &g, a.layers[l], a, l, N, in, d}, layer_input(a, l, N, C));
      });
  const TensorView dx = a.dx.prefix({N, C}), de = a.dtmp.prefix({N, C});
  const float p = rate(d, c.embedding_dropout);
  if (p > 0)
    dropout_backward(dx, dx, p, RngKey{d.seed, modernbert_embedding_site(), d.offset, d.micro},
                     dropout_rows(d, in));
  if (!g.embed.defined() && !g.emb_norm_w.defined()) return;  // frozen (adapters)
  emb_norm(c, w, &g).backward(de, dx, a.emb.prefix({N, C}), a.emb_mean.prefix({N}),
                              a.emb_rstd.prefix({N}));
  if (g.embed.defined())
    embedding_backward(g.embed, de, in.ids.prefix({N}), c.pad_token_id, a.workspace);
}

}  // namespace ftune
