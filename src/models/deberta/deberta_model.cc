// DeBERTa-v2/v3 forward and backward over planned buffers (see deberta_model.h).
#include "models/deberta/deberta_model.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/memory.h"
#include "core/tensor_columns.h"
#include "models/adapters.h"
#include "models/head_pooling.h"
#include "models/deberta/deberta_weights.h"
#include "models/layers/adapted_linear.h"
#include "models/layers/feed_forward.h"
#include "models/layers/first_token_rows.h"
#include "models/layers/fused_linear.h"
#include "models/layers/layer_stack.h"
#include "models/packed_dropout.h"
#include "ops/disentangled_attention.h"
#include "ops/cast.h"
#include "ops/dropout.h"
#include "ops/dropout_add_norm.h"
#include "ops/embedding.h"
#include "ops/first_token.h"
#include "ops/gelu.h"
#include "ops/layer_norm.h"
#include "ops/linear.h"
#include "ops/residual.h"
#include "ops/tanh_pooler.h"

namespace ftune {
namespace {

// Philox sites: the embeddings' dropout, then four per layer.
uint32_t probs_site(int64_t l) {
  return static_cast<uint32_t>(1 + 4 * l);
}
uint32_t attn_out_site(int64_t l) {
  return static_cast<uint32_t>(2 + 4 * l);
}
uint32_t ffn_out_site(int64_t l) {
  return static_cast<uint32_t>(3 + 4 * l);
}
uint32_t rel_site(int64_t l) {
  return static_cast<uint32_t>(4 + 4 * l);
}

constexpr int kind(DebertaSite s) {
  return static_cast<int>(s);
}

class DebertaModel final : public BackboneModel {
 public:
  DebertaModel(const DebertaConfig& c, const BackboneShape& shape) : c_(c), shape_(shape) {}

  void buffers(BufferTable& t) override { deberta_buffers(c_, shape_, a_, t); }

  void bind(const BoundParams& p) override {
    w_ = bind_deberta_weights(c_, p.values);
    if (p.shadow.table) shadow_ = bind_deberta_weights(c_, p.shadow);
    ad_ = p.adapters;
    if (shape_.training) {
      g_ = bind_deberta_weights(c_, p.grads);
      adg_ = p.adapter_grads;
    }
  }

  TensorView forward(const TokenInputs& in, const DropoutPlan& dropout) override {
    const DropoutPlan d = resolved_on_host(dropout, in);
    const int64_t N = in.tokens(), C = c_.hidden_size, B = in.B;
    const Shape NC{N, C}, N1{N};
    if (mixed() && shadow_.layers.size() != static_cast<size_t>(c_.num_layers))
      throw InternalError("mixed-precision DeBERTa without its weight shadow");
    TensorView sum = a_.emb_sum.prefix(NC), x = a_.emb_out.prefix(NC);
    embedding_forward(sum, in.ids, w_.word, false);
    if (w_.position.defined()) embedding_forward(sum, in.pos_ids, w_.position, true);
    if (w_.token_type.defined()) embedding_forward(sum, in.type_ids, w_.token_type, true);
    layer_norm_forward(x, a_.emb_mean.prefix(N1), a_.emb_rstd.prefix(N1), sum, w_.emb_ln_w,
                       w_.emb_ln_b, c_.layer_norm_eps);
    dropout_forward(x, x, p(d, c_.hidden_dropout), key(d, 0), rows(d, in));
    if (c_.norm_rel_ebd)
      layer_norm_forward(a_.rel_norm, a_.rel_mean, a_.rel_rstd, w_.rel, w_.rel_ln_w, w_.rel_ln_b,
                         c_.layer_norm_eps);
    for (int64_t l = 0; l < c_.num_layers; ++l) {
      layer_forward(l, x, in, d, /*recompute=*/false);
      if (!a_.first_token_last || l < c_.num_layers - 1) x = a_.layers[l].out.prefix(NC);
    }
    // First-token form: the last layer's rows are the first tokens'.
    hidden_ = a_.first_token_last ? a_.layers.back().out.prefix({B, 1, C})
              : in.packed()       ? x
                                  : x.reshape({B, in.T, C});
    return head_forward(in, d);
  }

  void backward(TensorView dlogits, const TokenInputs& in, const DropoutPlan& dropout) override {
    const DropoutPlan d = resolved_on_host(dropout, in);
    const int64_t N = in.tokens(), C = c_.hidden_size;
    const Shape NC{N, C}, N1{N};
    head_backward(dlogits, in, d);
    if (g_.rel.defined()) fill_zero(a_.grad_rel);
    // Frozen embeddings (adapters): nothing below layer 0 needs a gradient.
    const bool embeddings_train = g_.word.defined() || g_.emb_ln_w.defined();
    const auto input = [&](int64_t l) {
      return l > 0 ? a_.layers[l - 1].out.prefix(NC) : a_.emb_out.prefix(NC);
    };
    layer_stack_backward(
        c_.num_layers, a_.checkpointing,
        [&](int64_t l) { layer_forward(l, input(l), in, d, /*recompute=*/true); },
        [&](int64_t l) { layer_backward(l, input(l), l > 0 || embeddings_train, in, d); });
    // The relative embeddings: every layer's gradient summed in grad_rel, through the LayerNorm.
    if (g_.rel.defined()) {
      if (c_.norm_rel_ebd) {
        layer_norm_backward(a_.grad_rel_norm, g_.rel_ln_w, g_.rel_ln_b, a_.grad_rel, w_.rel,
                            w_.rel_ln_w, a_.rel_mean, a_.rel_rstd);
        residual_forward(g_.rel, g_.rel, a_.grad_rel_norm);
      } else {
        residual_forward(g_.rel, g_.rel, a_.grad_rel);
      }
    }
    if (!embeddings_train) return;
    // Embeddings: dropout, LayerNorm, the tables' sparse gradients.
    const TensorView dout = a_.grad_out.prefix(NC), dsum = a_.grad_sum.prefix(NC);
    dropout_backward(dout, dout, p(d, c_.hidden_dropout), key(d, 0), rows(d, in));
    layer_norm_backward(dsum, g_.emb_ln_w, g_.emb_ln_b, dout, a_.emb_sum.prefix(NC), w_.emb_ln_w,
                        a_.emb_mean.prefix(N1), a_.emb_rstd.prefix(N1));
    const TensorView ws = a_.workspace;
    if (g_.word.defined()) embedding_backward(g_.word, dsum, in.ids, c_.pad_token_id, ws);
    if (g_.position.defined()) embedding_backward(g_.position, dsum, in.pos_ids, -1, ws);
    if (g_.token_type.defined()) embedding_backward(g_.token_type, dsum, in.type_ids, -1, ws);
  }

  TensorView hidden() const override { return hidden_; }

 private:
  static float p(const DropoutPlan& d, float rate) { return d.training ? rate : 0.0f; }
  bool mixed() const { return a_.compute != DType::F32; }
  // The weights the GEMMs read: the 16-bit shadow under mixed precision, else the fp32 ones.
  const DebertaWeights& gemm() const { return mixed() ? shadow_ : w_; }
  static RngKey key(const DropoutPlan& d, uint32_t site) {
    return RngKey{d.seed, site, d.offset, d.micro};
  }
  static DropoutRows rows(const DropoutPlan& d, const TokenInputs& in) {
    return dropout_rows(d, in);
  }
  // The relative embeddings a layer reads before its dropout.
  TensorView rel_source() const { return c_.norm_rel_ebd ? a_.rel_norm : w_.rel; }
  // Layer l's relative embeddings after its dropout (the source itself when nothing drops).
  TensorView rel_input(int64_t l, const DropoutPlan& d) const {
    return p(d, c_.hidden_dropout) > 0 ? a_.layers[l].rel_drop : rel_source();
  }
  // The linear of site kind k in layer l (weight or bias; w: values or gradients). Query, key and
  // value are row blocks of the fused QKV matrix; PosKey / PosQuery are the projections of the
  // relative embeddings: key_proj / query_proj themselves with share_att_key.
  TensorView site_param(const DebertaWeights& w, int64_t l, DebertaSite k, bool bias) const {
    const DebertaLayerWeights& lw = w.layers[l];
    const int64_t C = c_.hidden_size;
    if (c_.share_att_key && (k == DebertaSite::PosKey || k == DebertaSite::PosQuery))
      k = k == DebertaSite::PosKey ? DebertaSite::Key : DebertaSite::Query;
    switch (k) {
      case DebertaSite::Query:
      case DebertaSite::Key:
      case DebertaSite::Value: {
        const TensorView fused = bias ? lw.qkv_b : lw.qkv_w;
        if (!fused.defined()) return {};
        const int64_t part = kind(k);
        return fused.slice0(part * C, (part + 1) * C);
      }
      case DebertaSite::AttnOut:
        return bias ? lw.attn_out_b : lw.attn_out_w;
      case DebertaSite::FfnIn:
        return bias ? lw.ffn_in_b : lw.ffn_in_w;
      case DebertaSite::FfnOut:
        return bias ? lw.ffn_out_b : lw.ffn_out_w;
      case DebertaSite::PosKey:
        return bias ? lw.pos_key_b : lw.pos_key_w;
      case DebertaSite::PosQuery:
        return bias ? lw.pos_query_b : lw.pos_query_w;
    }
    return {};
  }

  // The adapter (module) that acts at site kind k: a positional kind with share_att_key runs
  // key_proj's / query_proj's adapter (HF calls those modules on the relative embeddings).
  int adapter_kind(DebertaSite k) const {
    if (c_.share_att_key && k == DebertaSite::PosKey) return kind(DebertaSite::Key);
    if (c_.share_att_key && k == DebertaSite::PosQuery) return kind(DebertaSite::Query);
    return kind(k);
  }
  static bool positional(DebertaSite k) {
    return k == DebertaSite::PosKey || k == DebertaSite::PosQuery;
  }

  // The adapted linear block of site (l, k) (models/layers/adapted_linear.h); grads: with the
  // gradients. Its buffers and its dropout stream are the site kind's (a positional call has its
  // own mask; a content site's input rows are `content`: the tokens, or past attention the first
  // tokens of the first-token form); its frozen GEMM adds the fp32 bias.
  AdaptedLinear site(int64_t l, DebertaSite k, bool grads, const DropoutRows& content,
                     const DropoutPlan& d) const {
    const LinearParams p{site_param(w_, l, k, false),
                         site_param(w_, l, k, true),
                         site_param(gemm(), l, k, false),
                         site_param(w_, l, k, true),
                         grads ? site_param(g_, l, k, false) : TensorView(),
                         grads ? site_param(g_, l, k, true) : TensorView()};
    const AdapterPass pass{&ad_, grads ? &adg_ : nullptr, a_.adapter_scratch, d};
    return AdaptedLinear(p, pass,
                         AdapterSlot{l, adapter_kind(k), a_.layers[l].adapter[kind(k)],
                                     adapter_dropout_site(l, kind(k)),
                                     positional(k) ? DropoutRows{0, c_.rel_rows(), 0} : content});
  }
  // The fused QKV projection (its blocks' adapters are the Query / Key / Value sites').
  AdaptedLinear fused_qkv(int64_t l) const {
    const DebertaLayerWeights& lw = w_.layers[l];
    return AdaptedLinear(LinearParams{lw.qkv_w, lw.qkv_b, gemm().layers[l].qkv_w, lw.qkv_b,
                                      g_.layers.empty() ? TensorView() : g_.layers[l].qkv_w,
                                      g_.layers.empty() ? TensorView() : g_.layers[l].qkv_b});
  }

  // The QKV projection: the fused GEMM with the Query / Key / Value sites as its row blocks
  // (models/layers/fused_linear.h); when DoRA adapts all three, each forms its own z and the fused
  // GEMM is skipped.
  FusedLinear qkv_projection(int64_t l, bool grads, const TokenInputs& in,
                             const DropoutPlan& d) const {
    const int64_t C = c_.hidden_size;
    const auto block = [&](int part) {
      return FusedBlock{part * C, C,
                        site(l, static_cast<DebertaSite>(part), grads, rows(d, in), d)};
    };
    return FusedLinear(fused_qkv(l), {block(0), block(1), block(2)},
                       FusedLinear::AllDora::SkipFusedGemm);
  }

  // The layer's feed-forward block: FFN in, GELU, FFN out (models/layers/feed_forward.h), over
  // the rows past attention.
  FeedForward feed_forward(int64_t l, bool grads, const PastAttentionRows& r,
                           const DropoutPlan& d) const {
    return FeedForward(site(l, DebertaSite::FfnIn, grads, r.dropout, d),
                       site(l, DebertaSite::FfnOut, grads, r.dropout, d),
                       FeedForwardActivation::Gelu(c_.activation));
  }

  // y = x W^T + b of site (l, k) with its adapter, if any. x: the adapter's input; xg: the frozen
  // GEMM's (x, or under mixed precision x's 16-bit copy). y_has_base: the fused QKV GEMM ran.
  // recompute: the DoRA norms are current (checkpointing's second pass, or the positional call
  // after the content call of the same module).
  // content: as site()'s.
  void site_forward(int64_t l, DebertaSite k, TensorView y, TensorView x, TensorView xg,
                    const DropoutRows& content, const DropoutPlan& d, bool y_has_base,
                    bool recompute) {
    site(l, k, false, content, d).forward(y, x, xg, y_has_base, recompute);
  }

  // The backward of site (l, k): dy (the adapter may scale it in place first, DoRA) -> the frozen
  // or trained weights' gradients (x, xg: as site_forward's), dx (= or += with accumulate;
  // undefined: not needed) and the adapter's gradients (+=), its input gradient added to dx.
  void site_backward(int64_t l, DebertaSite k, TensorView dy, TensorView x, TensorView xg,
                     TensorView dx, bool accumulate, const DropoutRows& content,
                     const DropoutPlan& d) {
    site(l, k, true, content, d).backward(dy, x, xg, dx, accumulate, /*guard=*/true);
  }

  // Packed batches: the op runs row by row (a row of L tokens is a batch of one row, nothing
  // masked), each row's saved state (probabilities or statistics) after the previous row's and
  // its dropout at its own place in the step batch (row0 + b, the stream's Tv), so a packed batch
  // computes what the padded one does on its real tokens. fn(call, first token, L, saved).
  template <typename Fn>
  void each_attention_row(const TokenInputs& in, const DropoutPlan& d, int64_t l, TensorView probs,
                          Fn fn) const {
    if (!in.packed()) return fn(attention_call(in, d, l), 0, in.tokens(), probs);
    const DropoutRows place = rows(d, in);
    int64_t saved = 0;
    for (int64_t b = 0; b < in.B; ++b) {
      const int64_t t0 = in.host_cu_seqlens[b], L = in.host_cu_seqlens[b + 1] - t0;
      if (L == 0) continue;
      DisentangledCall call = attention_call(in, d, l);
      call.batch = 1;
      call.seq = L;
      call.key_mask = TensorView();
      call.place = DropoutRows{place.row0 + static_cast<uint64_t>(b), L, place.stream_seq};
      // What the op saves for a row on this device (CPU: H L^2 probabilities; CUDA: H L + L C).
      const int64_t n =
          disentangled_attention_buffers(call.spec, probs.device, 1, L, false).saved;
      fn(call, t0, L, probs.flat_range(saved, n));
      saved += n;
    }
  }

  DisentangledCall attention_call(const TokenInputs& in, const DropoutPlan& d, int64_t l) const {
    DisentangledCall call;
    call.spec = c_.attention();
    call.batch = in.B;
    call.seq = in.T;
    if (!in.packed()) call.key_mask = in.mask.prefix(Shape{in.B * in.T});
    call.dropout_p = p(d, c_.attention_dropout);
    call.rng = key(d, probs_site(l));
    call.place = rows(d, in);
    call.workspace = a_.workspace;
    return call;
  }

  // Layer l's GEMM inputs under mixed precision: 16-bit copies of the fp32 layer input x, of the
  // relative embeddings it reads and of its first LayerNorm's output (fp32: the tensors
  // themselves).
  TensorView gemm_x(int64_t l, TensorView x) const {
    return mixed() ? a_.layers[l].x_h.prefix(x.shape) : x;
  }
  TensorView gemm_rel(int64_t l, const DropoutPlan& d) const {
    return mixed() ? a_.layers[l].rel_h : rel_input(l, d);
  }
  TensorView gemm_ln1(int64_t l, int64_t N) const {
    const DebertaLayerActs& la = a_.layers[l];
    return (mixed() ? la.ln1_h : la.ln1).prefix({N, c_.hidden_size});
  }

  // The rows layer l computes past attention (models/layers/first_token_rows.h): every token, or
  // in the first-token form's last layer the B first tokens.
  PastAttentionRows layer_rows(int64_t l, const TokenInputs& in, const DropoutPlan& d) const {
    return past_attention_rows(a_.first_token_last && l == c_.num_layers - 1, in, d);
  }

  void layer_forward(int64_t l, TensorView x, const TokenInputs& in, const DropoutPlan& d,
                     bool recompute) {
    const int64_t N = in.tokens(), C = c_.hidden_size, F = c_.intermediate_size;
    const PastAttentionRows r = layer_rows(l, in, d);
    const int64_t M = r.count;  // rows past attention
    const Shape NC{N, C}, MC{M, C}, M1{M};
    const DebertaLayerWeights& lw = w_.layers[l];
    DebertaLayerActs& la = a_.layers[l];
    const TensorView qkv = la.qkv.prefix({N, 3 * C}), ctx = la.ctx.prefix(NC),
                     attn = la.attn.prefix(MC), ln1 = la.ln1.prefix(MC);
    const TensorView ffn_pre = la.ffn_pre.prefix({M, F}), ffn_act = la.ffn_act.prefix({M, F}),
                     ffn_out = la.ffn_out.prefix(MC);
    const TensorView xg = gemm_x(l, x), ln1g = gemm_ln1(l, M);
    if (mixed()) cast(xg, x);
    qkv_projection(l, false, in, d).forward(qkv, x, xg, recompute);
    const float pr = p(d, c_.hidden_dropout);
    if (pr > 0)
      dropout_forward(la.rel_drop, rel_source(), pr, key(d, rel_site(l)),
                      DropoutRows{0, c_.rel_rows(), 0});
    const TensorView rel = rel_input(l, d), relg = gemm_rel(l, d);
    if (mixed()) cast(relg, rel);
    // share_att_key: key_proj / query_proj again, on the relative embeddings (their DoRA norms
    // were just formed by the content call).
    const bool shared = c_.share_att_key;
    if (c_.c2p)
      site_forward(l, DebertaSite::PosKey, la.pos_key, rel, relg, rows(d, in), d, false,
                   recompute || shared);
    if (c_.p2c)
      site_forward(l, DebertaSite::PosQuery, la.pos_query, rel, relg, rows(d, in), d, false,
                   recompute || shared);
    each_attention_row(
        in, d, l, la.probs,
        [&](const DisentangledCall& call, int64_t t0, int64_t L, TensorView saved) {
          const auto part = [&](int i) { return columns(qkv, i * C, C).slice0(t0, t0 + L); };
          disentangled_attention_forward(call, ctx.slice0(t0, t0 + L), saved, part(0), part(1),
                                         part(2), c_.c2p ? la.pos_key : TensorView(),
                                         c_.p2c ? la.pos_query : TensorView());
        });
    // Past attention: every token, or the first tokens' attention output and residual.
    const PastAttentionInputs past = gather_past_attention(r, ctx, x, a_.first_ctx, a_.first_x, in);
    site_forward(l, DebertaSite::AttnOut, attn, past.ctx, past.ctx, r.dropout, d, false,
                 recompute);
    // LayerNorm(dropout(attn) + x) in one pass (attn kept); under mixed precision the 16-bit
    // sublayer output joins the fp32 stream, and ln1's 16-bit copy for the next GEMM comes out of
    // the same pass.
    dropout_add_layer_norm_forward(ln1, mixed() ? ln1g : TensorView(), la.sum1.prefix(MC),
                                   la.ln1_mean.prefix(M1), la.ln1_rstd.prefix(M1), attn, past.x,
                                   lw.ln1_w, lw.ln1_b, c_.layer_norm_eps, pr,
                                   key(d, attn_out_site(l)), r.dropout);
    feed_forward(l, false, r, d).forward(ffn_out, ffn_act, ffn_pre, ln1g, ln1g, recompute);
    dropout_add_layer_norm_forward(la.out.prefix(MC), TensorView(), la.sum2.prefix(MC),
                                   la.ln2_mean.prefix(M1), la.ln2_rstd.prefix(M1), ffn_out, ln1,
                                   lw.ln2_w, lw.ln2_b, c_.layer_norm_eps, pr,
                                   key(d, ffn_out_site(l)), r.dropout);
  }

  // a_.grad_out holds dL/d(out of layer l); on return, dL/dx (when need_dx).
  void layer_backward(int64_t l, TensorView x, bool need_dx, const TokenInputs& in,
                      const DropoutPlan& d) {
    const int64_t N = in.tokens(), C = c_.hidden_size, F = c_.intermediate_size;
    const PastAttentionRows r = layer_rows(l, in, d);
    const int64_t M = r.count;  // rows past attention
    const Shape NC{N, C}, MC{M, C}, M1{M};
    const DebertaLayerWeights& lw = w_.layers[l];
    const DebertaLayerWeights& lg = g_.layers[l];
    const DebertaLayerActs& la = a_.layers[l];
    const TensorView dout = a_.grad_out.prefix(MC), dsum = a_.grad_sum.prefix(MC),
                     dtmp = a_.grad_tmp.prefix(MC), dctx = a_.grad_ctx.prefix(NC),
                     dffn = a_.grad_ffn.prefix({M, F}), dqkv = a_.grad_qkv.prefix({N, 3 * C});
    const float pr = p(d, c_.hidden_dropout);
    // out = LN(dropout(ffn_out) + ln1): dsum is ln1's gradient through the residual, dtmp
    // ffn_out's (16-bit under mixed precision), from the same pass.
    layer_norm_dropout_backward(dsum, dtmp, lg.ln2_w, lg.ln2_b, dout, la.sum2.prefix(MC),
                                lw.ln2_w, la.ln2_mean.prefix(M1), la.ln2_rstd.prefix(M1), pr,
                                key(d, ffn_out_site(l)), r.dropout);
    const TensorView ffn_act = la.ffn_act.prefix({M, F}), ln1g = gemm_ln1(l, M);
    feed_forward(l, true, r, d)
        .backward(dtmp, ffn_act, dffn, la.ffn_pre.prefix({M, F}), dffn, ln1g, ln1g, dsum,
                  /*accumulate=*/true);
    // First-token form: the residual's and the attention output's gradients are the first
    // tokens' (B, C), scattered into (N, C) rows below.
    const TensorView dres = r.first_tokens ? a_.first_x.prefix(MC) : dout;
    const TensorView dctx_r = r.first_tokens ? a_.first_dctx.prefix(MC) : dctx;
    layer_norm_dropout_backward(dres, dtmp, lg.ln1_w, lg.ln1_b, dsum, la.sum1.prefix(MC),
                                lw.ln1_w, la.ln1_mean.prefix(M1), la.ln1_rstd.prefix(M1), pr,
                                key(d, attn_out_site(l)), r.dropout);
    // The attention output the AttnOut GEMM read.
    const TensorView ctx = r.first_tokens ? a_.first_ctx.prefix(MC) : la.ctx.prefix(NC);
    site_backward(l, DebertaSite::AttnOut, dtmp, ctx, ctx, dctx_r, false, r.dropout, d);
    if (r.first_tokens) scatter_past_attention(dctx, dctx_r, a_.grad_out.prefix(NC), dres, in);
    const TensorView qkv = la.qkv.prefix({N, 3 * C});
    // Packed rows: the first row writes the position gradients, each later one writes its own
    // into grad_pos_*_row and adds them (the op overwrites its activation gradients). They stay
    // fp32 under mixed precision (summed over the rows), rounded once for the GEMMs below.
    bool first = true;
    each_attention_row(in, d, l, la.probs,
                       [&](const DisentangledCall& call, int64_t t0, int64_t L, TensorView saved) {
                         const auto rows_of = [&](TensorView m, int i) {
                           return columns(m, i * C, C).slice0(t0, t0 + L);
                         };
                         const TensorView dpk = !c_.c2p ? TensorView()
                                                : first ? a_.grad_pos_key
                                                        : a_.grad_pos_key_row;
                         const TensorView dpq = !c_.p2c ? TensorView()
                                                : first ? a_.grad_pos_query
                                                        : a_.grad_pos_query_row;
                         disentangled_attention_backward(
                             call, rows_of(dqkv, 0), rows_of(dqkv, 1), rows_of(dqkv, 2), dpk, dpq,
                             dctx.slice0(t0, t0 + L), rows_of(qkv, 0), rows_of(qkv, 1),
                             rows_of(qkv, 2), c_.c2p ? la.pos_key : TensorView(),
                             c_.p2c ? la.pos_query : TensorView(), saved);
                         if (!first && c_.c2p)
                           residual_forward(a_.grad_pos_key, a_.grad_pos_key, dpk);
                         if (!first && c_.p2c)
                           residual_forward(a_.grad_pos_query, a_.grad_pos_query, dpq);
                         first = false;
                       });
    // The position projections: their weights' (and adapters') gradients, and the relative
    // embeddings' (summed over the layers in grad_rel; none when they are frozen).
    const TensorView rel = rel_input(l, d), relg = gemm_rel(l, d);
    const TensorView drel = g_.rel.defined() ? a_.grad_rel_drop : TensorView();
    const auto position_grad = [&](const TensorView& g, const TensorView& g_h) {
      if (!mixed()) return g;
      cast(g_h, g);
      return g_h;
    };
    if (c_.c2p)
      site_backward(l, DebertaSite::PosKey, position_grad(a_.grad_pos_key, a_.grad_pos_h), rel,
                    relg, drel, false, rows(d, in), d);
    if (c_.p2c)
      site_backward(l, DebertaSite::PosQuery, position_grad(a_.grad_pos_query, a_.grad_pos_h),
                    rel, relg, drel, c_.c2p, rows(d, in), d);
    if (drel.defined() && (c_.c2p || c_.p2c)) {
      dropout_backward(drel, drel, pr, key(d, rel_site(l)), DropoutRows{0, c_.rel_rows(), 0});
      residual_forward(a_.grad_rel, a_.grad_rel, drel);
    }
    // dx = the residual part (in dout) + the QKV input gradient. DoRA first scales each block's
    // gradient in place; the fused backward then reads them all.
    const TensorView dx = need_dx ? a_.grad_out.prefix(NC) : TensorView();
    qkv_projection(l, true, in, d)
        .backward(dqkv, x, gemm_x(l, x), dx, /*accumulate=*/true, /*guard=*/true);
  }

  // The pooler's dense with its adapter (PEFT target "pooler.dense"), if any: the head's (B, C)
  // rows, one position per sequence.
  AdaptedLinear pooler(const DropoutPlan& d, bool grads) const {
    const AdapterSite s = deberta_pooler_site(c_);
    const LinearParams p{w_.pool_w, w_.pool_b, w_.pool_w, w_.pool_b,
                         grads ? g_.pool_w : TensorView(), grads ? g_.pool_b : TensorView()};
    // The head is fp32: no staging.
    AdapterScratch scratch = a_.adapter_scratch;
    scratch.stage_x = scratch.stage_y = scratch.stage_dx = TensorView();
    const AdapterPass pass{&ad_, grads ? &adg_ : nullptr, scratch, d};
    return AdaptedLinear(p, pass,
                         AdapterSlot{s.layer, s.kind, a_.pool_adapter,
                                     adapter_dropout_site(s.layer, s.kind), DropoutRows{d.row0, 1, 1}});
  }

  TensorView head_forward(const TokenInputs& in, const DropoutPlan& d) {
    const int64_t B = in.B, C = c_.hidden_size, K = c_.num_labels();
    const Shape BC{B, C};
    const TensorView cls = a_.cls.prefix(BC), cls_drop = a_.cls_drop.prefix(BC),
                     pre = a_.pool_pre.prefix(BC), pooled = a_.pooled.prefix(BC),
                     pooled_drop = a_.pooled_drop.prefix(BC), logits = a_.logits.prefix({B, K});
    first_tokens_forward(cls, hidden_, in);
    dropout_forward(cls_drop, cls, p(d, c_.pooler_dropout), key(d, head_input_dropout_site()),
                    DropoutRows{d.row0, 1, 1});
    pooler(d, false).forward(pre, cls_drop);
    if (c_.pooler_act == PoolerAct::Tanh) {
      copy(pooled, pre);
      tanh_forward(pooled);
    } else {
      gelu_forward(pooled, pre, c_.pooler_act == PoolerAct::Gelu ? GeluForm::Erf : GeluForm::Tanh);
    }
    dropout_forward(pooled_drop, pooled, p(d, c_.cls_dropout), key(d, head_pooled_dropout_site()),
                    DropoutRows{d.row0, 1, 1});
    linear_forward(logits, pooled_drop, w_.cls_w, w_.cls_b);
    return logits;
  }

  // dlogits -> a_.grad_out (B, T, C): zero but at the first tokens (first-token form: (B, 1, C)).
  void head_backward(TensorView dlogits, const TokenInputs& in, const DropoutPlan& d) {
    const int64_t B = in.B, C = c_.hidden_size;
    const Shape BC{B, C};
    const TensorView ga = a_.grad_pool_a.prefix(BC), gb = a_.grad_pool_b.prefix(BC);
    linear_backward(ga, g_.cls_w, g_.cls_b, dlogits, a_.pooled_drop.prefix(BC), w_.cls_w);
    dropout_backward(ga, ga, p(d, c_.cls_dropout), key(d, head_pooled_dropout_site()),
                     DropoutRows{d.row0, 1, 1});
    if (c_.pooler_act == PoolerAct::Tanh)
      tanh_backward(gb, ga, a_.pooled.prefix(BC));
    else
      gelu_backward(gb, a_.pool_pre.prefix(BC), ga,
                    c_.pooler_act == PoolerAct::Gelu ? GeluForm::Erf : GeluForm::Tanh);
    pooler(d, true).backward(gb, a_.cls_drop.prefix(BC), ga);
    dropout_backward(ga, ga, p(d, c_.pooler_dropout), key(d, head_input_dropout_site()),
                     DropoutRows{d.row0, 1, 1});
    const Shape hidden = a_.first_token_last ? Shape{B, 1, C}
                         : in.packed()      ? Shape{in.N, C}
                                            : Shape{B, in.T, C};
    first_tokens_backward(a_.grad_out.prefix(hidden), ga, in);
  }

  DebertaConfig c_;
  BackboneShape shape_;
  DebertaWeights w_, g_;
  DebertaWeights shadow_;  // mixed precision: the layers' weights in the compute type
  AdapterSet ad_, adg_;  // the adapters and their gradients (empty without)
  DebertaActs a_;
  TensorView hidden_;
};

}  // namespace

std::unique_ptr<BackboneModel> make_deberta_model(const DebertaConfig& config,
                                                  const BackboneShape& shape) {
  return std::make_unique<DebertaModel>(config, shape);
}

}  // namespace ftune
