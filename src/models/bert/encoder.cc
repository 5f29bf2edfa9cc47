// Encoder forward and backward passes (see encoder.h for the equations and the gradient rule).
#include "models/bert/encoder.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/tensor_columns.h"
#include "models/adapters.h"
#include "models/layers/first_token_rows.h"
#include "models/layers/adapted_linear.h"
#include "models/layers/feed_forward.h"
#include "models/layers/fused_linear.h"
#include "models/layers/layer_stack.h"
#include "ops/attention.h"
#include "ops/attention_cudnn.h"
#include "ops/cast.h"
#include "ops/dropout.h"
#include "ops/dropout_add_norm.h"
#include "ops/embedding.h"
#include "ops/layer_norm.h"
#include "ops/linear.h"
#include "ops/lora.h"

namespace ftune {

AttentionSpec encoder_attention_spec(const EncoderConfig& c) {
  AttentionSpec s;
  s.heads = s.kv_heads = c.num_heads;
  s.head_dim = c.head_dim();
  s.scale = default_attention_scale(s.head_dim);
  return s;
}

namespace {

float dropout_p(const DropoutPlan& d, float p) {
  return d.training ? p : 0.0f;
}

RngKey key(const DropoutPlan& d, uint32_t site) {
  return RngKey{d.seed, site, d.offset, d.micro};
}

DropoutRows rows(const DropoutPlan& d, const TokenInputs& in) {
  return dropout_rows(d, in);
}

// The rows layer l computes past attention (models/layers/first_token_rows.h): every token, or in
// the first-token form's last layer the B first tokens.
PastAttentionRows layer_rows(const EncoderConfig& c, const EncoderActivations& a,
                             const TokenInputs& in, const DropoutPlan& d, int64_t l) {
  return past_attention_rows(a.first_token_last && l == c.num_layers - 1, in, d);
}

// Layer l's attention call: padded rows with the key mask, or packed rows at their cu_seqlens
// (varlen, nothing masked); the run's kernel (one channel: EncoderActivations::cudnn_attention);
// the layer's probability-dropout stream, row b of the call at row0 + b of the step's batch.
AttentionCall attention_call(const EncoderConfig& c, const EncoderActivations& a,
                             const TokenInputs& in, const DropoutPlan& d, int64_t l) {
  AttentionCall call;
  call.spec = encoder_attention_spec(c);
  if (in.packed())
    call.rows = {in.B, in.max_len, in.cu_seqlens, {}};
  else
    call.rows = {in.B, in.T, {}, in.mask.prefix(Shape{in.B, in.T})};
  call.dropout_p = dropout_p(d, c.attention_dropout);
  call.rng = key(d, attention_probs_site(l));
  call.place = rows(d, in);
  call.kernel = a.cudnn_attention ? AttentionKernel::Cudnn : AttentionKernel::Ftune;
  call.workspace = a.workspace;
  return call;
}

EncoderSite qkv_site(int part) {
  return static_cast<EncoderSite>(part);
}

// The weight matrix (or bias) a GEMM reads: the 16-bit shadow under mixed precision, else the
// fp32 one.
TensorView gemm_weight(const EncoderWeights& w, int64_t l, TensorView LayerWeights::*m) {
  return w.shadow.empty() ? w.layers[l].*m : w.shadow[l].*m;
}

// The weight (or bias) of the linear an adapter site sits on; Q, K and V are row blocks of the
// fused QKV projection.
TensorView site_param(const LayerWeights& lw, EncoderSite s, bool bias) {
  switch (s) {
    case EncoderSite::Query:
    case EncoderSite::Key:
    case EncoderSite::Value: {
      const TensorView fused = bias ? lw.qkv_b : lw.qkv_w;
      if (!fused.defined()) return {};
      const int64_t C = fused.dim(0) / 3, part = static_cast<int64_t>(s);  // (3C, C) or (3C)
      return fused.slice0(part * C, (part + 1) * C);
    }
    case EncoderSite::AttnOut:
      return bias ? lw.attn_out_b : lw.attn_out_w;
    case EncoderSite::FfnIn:
      return bias ? lw.ffn_in_b : lw.ffn_in_w;
    case EncoderSite::FfnOut:
      return bias ? lw.ffn_out_b : lw.ffn_out_w;
  }
  return {};
}

// The adapted linear block of (l, s) (models/layers/adapted_linear.h): the fp32 weight and bias,
// what the GEMM reads (the 16-bit shadow's rows and bias under mixed precision: what autocast adds
// and cuBLASLt fuses), the gradients (g: backward only) and the site's adapter, if any.
// `dropout`: the site's input rows in the dropout streams (its adapter dropout's).
AdaptedLinear site_linear(const EncoderWeights& w, const EncoderWeights* g,
                          const LayerActivations& la, const EncoderActivations& a, int64_t l,
                          EncoderSite s, const DropoutPlan& d, const DropoutRows& dropout) {
  const LayerWeights& lw = w.layers[l];
  const LayerWeights& gemm = w.shadow.empty() ? lw : w.shadow[l];
  LinearParams p{site_param(lw, s, false), site_param(lw, s, true), site_param(gemm, s, false),
                 site_param(gemm, s, true), {}, {}};
  if (g) p.weight_grad = site_param(g->layers[l], s, false), p.bias_grad = site_param(g->layers[l], s, true);
  const int i = static_cast<int>(s);
  const AdapterPass pass{&w.adapters, g ? &g->adapters : nullptr, a.adapter_scratch, d};
  return AdaptedLinear(p, pass,
                       AdapterSlot{l, i, la.adapter[i], adapter_dropout_site(l, i), dropout});
}

// The fused QKV projection (no adapter: its blocks' are the Query / Key / Value sites').
AdaptedLinear fused_qkv(const EncoderWeights& w, const EncoderWeights* g, int64_t l) {
  LinearParams p{w.layers[l].qkv_w, w.layers[l].qkv_b, gemm_weight(w, l, &LayerWeights::qkv_w),
                 gemm_weight(w, l, &LayerWeights::qkv_b), {}, {}};
  if (g) p.weight_grad = g->layers[l].qkv_w, p.bias_grad = g->layers[l].qkv_b;
  return AdaptedLinear(p);
}

// The QKV projection: one GEMM over the fused matrix, the Query / Key / Value sites as its row
// blocks (models/layers/fused_linear.h); when DoRA adapts all three, each forms its own z and the
// fused GEMM is skipped.
FusedLinear qkv_projection(const EncoderConfig& c, const EncoderWeights& w,
                           const EncoderWeights* g, const LayerActivations& la,
                           const EncoderActivations& a, int64_t l, const DropoutPlan& d,
                           const TokenInputs& in) {
  const int64_t C = c.hidden_size;
  const auto block = [&](int part) {
    return FusedBlock{part * C, C, site_linear(w, g, la, a, l, qkv_site(part), d, rows(d, in))};
  };
  return FusedLinear(fused_qkv(w, g, l), {block(0), block(1), block(2)},
                     FusedLinear::AllDora::SkipFusedGemm);
}

// The layer's feed-forward block: FFN in, GELU, FFN out (models/layers/feed_forward.h), over the
// rows past attention.
FeedForward feed_forward(const EncoderConfig& c, const EncoderWeights& w, const EncoderWeights* g,
                         const LayerActivations& la, const EncoderActivations& a, int64_t l,
                         const DropoutPlan& d, const PastAttentionRows& r) {
  return FeedForward(site_linear(w, g, la, a, l, EncoderSite::FfnIn, d, r.dropout),
                     site_linear(w, g, la, a, l, EncoderSite::FfnOut, d, r.dropout),
                     FeedForwardActivation::Gelu(c.activation));
}

// One transformer layer: x (N, C) -> la.out; x_h: x's 16-bit copy under mixed precision (the
// GEMM's input), else undefined. recompute: checkpointing's second pass.
void layer_forward(const EncoderConfig& c, const EncoderWeights& w, LayerActivations& la,
                   const EncoderActivations& a, int64_t l, TensorView x, TensorView x_h,
                   const TokenInputs& in, const DropoutPlan& d, bool recompute = false) {
  const int64_t N = in.tokens(), C = c.hidden_size, F = c.intermediate_size;
  const float eps = c.layer_norm_eps;
  const PastAttentionRows r = layer_rows(c, a, in, d, l);
  const int64_t M = r.count;  // rows past attention
  const Shape NC{N, C}, MC{M, C}, M1{M};
  const LayerWeights& lw = w.layers[l];
  TensorView qkv = la.qkv.prefix({N, 3 * C}), ctx = la.ctx.prefix(NC), attn = la.attn.prefix(MC);
  TensorView ln1 = la.ln1.prefix(MC), ffn_pre = la.ffn_pre.prefix({M, F}),
             ffn_act = la.ffn_act.prefix({M, F});
  TensorView ffn_out = la.ffn_out.prefix(MC), out = la.out.prefix(MC);
  const bool mixed = a.compute != DType::F32;
  const TensorView xg = mixed ? x_h : x;  // what the QKV GEMM reads
  const TensorView ln1_h = mixed ? la.ln1_h.prefix(MC) : TensorView();
  // (Nothing reads the 16-bit copy of the first-token form's output: no layer follows.)
  const TensorView out_h = mixed && !r.first_tokens ? la.out_h.prefix(MC) : TensorView();

  const auto site = [&](EncoderSite s) {
    return site_linear(w, nullptr, la, a, l, s, d, r.dropout);
  };
  qkv_projection(c, w, nullptr, la, a, l, d, in).forward(qkv, x, xg, recompute);
  attention_forward(attention_call(c, a, in, d, l), ctx, la.probs, columns(qkv, 0, C),
                    columns(qkv, C, C), columns(qkv, 2 * C, C));
  // Past attention: every token, or the first tokens' attention output and residual.
  const PastAttentionInputs past = gather_past_attention(r, ctx, x, a.first_ctx, a.first_x, in);
  site(EncoderSite::AttnOut).forward(attn, past.ctx, past.ctx, /*y_has_base=*/false, recompute);
  // LayerNorm(dropout(attn) + x) in one pass (ops/dropout_add_norm.h; attn is not modified):
  // under mixed precision the 16-bit sublayer output is added to the fp32 stream (autocast's
  // promotion), normalised in fp32, and copied to 16 bits for the next GEMM (ln1_h).
  dropout_add_layer_norm_forward(ln1, ln1_h, la.sum1.prefix(MC), la.ln1_mean.prefix(M1),
                                 la.ln1_rstd.prefix(M1), attn, past.x, lw.ln1_w, lw.ln1_b, eps,
                                 dropout_p(d, c.hidden_dropout), key(d, attention_output_site(l)),
                                 r.dropout);
  const TensorView ffn_in = mixed ? ln1_h : ln1;
  feed_forward(c, w, nullptr, la, a, l, d, r).forward(ffn_out, ffn_act, ffn_pre, ffn_in, ffn_in,
                                                      recompute);
  dropout_add_layer_norm_forward(out, out_h, la.sum2.prefix(MC), la.ln2_mean.prefix(M1),
                                 la.ln2_rstd.prefix(M1), ffn_out, ln1, lw.ln2_w, lw.ln2_b, eps,
                                 dropout_p(d, c.hidden_dropout), key(d, ffn_output_site(l)),
                                 r.dropout);
}

// One layer's backward: a.grad_out holds dL/d(out); on return it holds dL/dx (when need_dx).
// x_h: as in layer_forward.
void layer_backward(const EncoderConfig& c, const EncoderWeights& w, const EncoderWeights& g,
                    const LayerActivations& la, EncoderActivations& a, int64_t l, TensorView x,
                    TensorView x_h, bool need_dx, const TokenInputs& in, const DropoutPlan& d) {
  const int64_t N = in.tokens(), C = c.hidden_size, F = c.intermediate_size;
  const PastAttentionRows r = layer_rows(c, a, in, d, l);
  const int64_t M = r.count;  // rows past attention
  const Shape NC{N, C}, MC{M, C}, M1{M};
  // grad_out holds dL/d(output of the current layer); grad_sum, grad_tmp, grad_ctx are scratch.
  TensorView dout = a.grad_out.prefix(MC), dsum = a.grad_sum.prefix(MC),
             dtmp = a.grad_tmp.prefix(MC);
  TensorView dctx = a.grad_ctx.prefix(NC), dffn = a.grad_ffn.prefix({M, F}),
             dqkv = a.grad_qkv.prefix({N, 3 * C});
  const LayerWeights& lw = w.layers[l];
  const LayerWeights& lg = g.layers[l];
  const bool mixed = a.compute != DType::F32;
  // The GEMMs' inputs: 16-bit copies under mixed precision.
  const TensorView ln1 = (mixed ? la.ln1_h : la.ln1).prefix(MC),
                   ffn_act = la.ffn_act.prefix({M, F});
  // The attention output the AttnOut GEMM read.
  const TensorView ctx = r.first_tokens ? a.first_ctx.prefix(MC) : la.ctx.prefix(NC);
  const TensorView xg = mixed ? x_h : x;

  // out = LayerNorm(dropout(f) + h1): dsum is the gradient of h1 (through the residual) and of
  // dropout(f); dtmp, f's, is dropout'(dsum), written by the same pass.
  layer_norm_dropout_backward(dsum, dtmp, lg.ln2_w, lg.ln2_b, dout, la.sum2.prefix(MC), lw.ln2_w,
                              la.ln2_mean.prefix(M1), la.ln2_rstd.prefix(M1),
                              dropout_p(d, c.hidden_dropout), key(d, ffn_output_site(l)),
                              r.dropout);
  const auto site = [&](EncoderSite s) { return site_linear(w, &g, la, a, l, s, d, r.dropout); };
  // dh1 = residual part (already in dsum) + the FFN input gradient, added in place.
  feed_forward(c, w, &g, la, a, l, d, r)
      .backward(dtmp, ffn_act, dffn, la.ffn_pre.prefix({M, F}), dffn, ln1, ln1, dsum,
                /*accumulate=*/true);

  // h1 = LayerNorm(dropout(a) + x): dres becomes the gradient of x (residual), dtmp that of a.
  // First-token form: they and the attention output's gradient are the first tokens' (B, C),
  // scattered into (N, C) rows below.
  const TensorView dres = r.first_tokens ? a.first_x.prefix(MC) : dout;
  const TensorView dctx_r = r.first_tokens ? a.first_dctx.prefix(MC) : dctx;
  layer_norm_dropout_backward(dres, dtmp, lg.ln1_w, lg.ln1_b, dsum, la.sum1.prefix(MC), lw.ln1_w,
                              la.ln1_mean.prefix(M1), la.ln1_rstd.prefix(M1),
                              dropout_p(d, c.hidden_dropout), key(d, attention_output_site(l)),
                              r.dropout);
  site(EncoderSite::AttnOut).backward(dtmp, ctx, ctx, dctx_r);
  if (r.first_tokens) scatter_past_attention(dctx, dctx_r, a.grad_out.prefix(NC), dres, in);
  const TensorView qkv = la.qkv.prefix({N, 3 * C});
  attention_backward(attention_call(c, a, in, d, l), columns(dqkv, 0, C), columns(dqkv, C, C),
                     columns(dqkv, 2 * C, C), dctx, columns(qkv, 0, C), columns(qkv, C, C),
                     columns(qkv, 2 * C, C), la.ctx.prefix(NC), la.probs);
  // dx = residual part (in grad_out) + the QKV input gradient: the previous layer's output
  // gradient.
  const TensorView dx = need_dx ? a.grad_out.prefix(NC) : TensorView();
  qkv_projection(c, w, &g, la, a, l, d, in)
      .backward(dqkv, x, xg, dx, /*accumulate=*/true, /*guard=*/true);
}

}  // namespace

TensorView encoder_forward(const EncoderConfig& c, const EncoderWeights& w, EncoderActivations& a,
                           const TokenInputs& in, const DropoutPlan& dropout) {
  const DropoutPlan& d = dropout;  // a packed micro-batch's place is read by the kernels too
  const int64_t B = in.B, T = in.T, N = in.tokens(), C = c.hidden_size;
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
                  key(d, embedding_dropout_site()), rows(d, in));
  const bool mixed = a.compute != DType::F32;
  if (mixed) {
    if (w.shadow.size() != static_cast<size_t>(c.num_layers))
      throw InternalError("mixed-precision encoder without its weight shadow");
    cast(a.emb_out_h.prefix(NC), emb_out);
  }

  TensorView x = emb_out, x_h = mixed ? a.emb_out_h.prefix(NC) : TensorView();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    layer_forward(c, w, a.layers[l], a, l, x, x_h, in, d);
    if (a.first_token_last && l == c.num_layers - 1)
      return a.layers[l].out.prefix({B, 1, C});  // the first tokens' rows
    x = a.layers[l].out.prefix(NC);
    if (mixed) x_h = a.layers[l].out_h.prefix(NC);
  }
  return in.packed() ? x : x.reshape({B, T, C});
}

void encoder_backward(const EncoderConfig& c, const EncoderWeights& w, const EncoderWeights& g,
                      EncoderActivations& a, const TokenInputs& in, const DropoutPlan& dropout) {
  const DropoutPlan& d = dropout;  // a packed micro-batch's place is read by the kernels too
  const int64_t N = in.tokens(), C = c.hidden_size;
  const Shape NC{N, C}, N1{N};
  // Frozen embeddings (adapters): nothing below layer 0 needs a gradient.
  const bool embeddings_train = g.word.defined() || g.emb_ln_w.defined();
  const bool mixed = a.compute != DType::F32;
  const auto x = [&](int64_t l) {
    return l > 0 ? a.layers[l - 1].out.prefix(NC) : a.emb_out.prefix(NC);
  };
  const auto x_h = [&](int64_t l) {
    return !mixed ? TensorView() : l > 0 ? a.layers[l - 1].out_h.prefix(NC) : a.emb_out_h.prefix(NC);
  };
  // Checkpointing (models/layers/layer_stack.h). Mixed precision: the input's 16-bit copy is cast
  // again before a recomputation (its slot was reused; the cast gives the same bits).
  layer_stack_backward(
      c.num_layers, a.checkpointing,
      [&](int64_t l) {
        if (mixed && l > 0) cast(x_h(l), x(l));
        layer_forward(c, w, a.layers[l], a, l, x(l), x_h(l), in, d, /*recompute=*/true);
      },
      [&](int64_t l) {
        layer_backward(c, w, g, a.layers[l], a, l, x(l), x_h(l), l > 0 || embeddings_train, in, d);
      });
  if (!embeddings_train) return;

  // Embeddings: dropout, LayerNorm, then the three tables' sparse gradients.
  TensorView dout = a.grad_out.prefix(NC), dsum = a.grad_sum.prefix(NC);
  dropout_backward(dout, dout, dropout_p(d, c.hidden_dropout), key(d, embedding_dropout_site()),
                   rows(d, in));
  layer_norm_backward(dsum, g.emb_ln_w, g.emb_ln_b, dout, a.emb_sum.prefix(NC), w.emb_ln_w,
                      a.emb_mean.prefix(N1), a.emb_rstd.prefix(N1));
  // HF's word embeddings (and RoBERTa's positions) are nn.Embedding(padding_idx=pad_token_id).
  if (g.word.defined()) embedding_backward(g.word, dsum, in.ids, c.pad_token_id, a.workspace);
  if (g.token_type.defined()) embedding_backward(g.token_type, dsum, in.type_ids, -1, a.workspace);
  if (g.position.defined())
    embedding_backward(g.position, dsum, in.pos_ids, c.roberta_like() ? c.pad_token_id : -1,
                       a.workspace);
}

}  // namespace ftune
