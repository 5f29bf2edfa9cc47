// DeBERTa-v2/v3 forward and backward over planned buffers (see deberta_model.h).
#include "models/deberta_model.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/memory.h"
#include "models/classification_head.h"
#include "models/deberta_weights.h"
#include "models/gradient_ready.h"
#include "ops/disentangled_attention.h"
#include "ops/dropout.h"
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
uint32_t probs_site(int64_t l) { return static_cast<uint32_t>(1 + 4 * l); }
uint32_t attn_out_site(int64_t l) { return static_cast<uint32_t>(2 + 4 * l); }
uint32_t ffn_out_site(int64_t l) { return static_cast<uint32_t>(3 + 4 * l); }
uint32_t rel_site(int64_t l) { return static_cast<uint32_t>(4 + 4 * l); }

// Columns [begin, begin + count) of a row-major 2-D view.
TensorView columns(const TensorView& v, int64_t begin, int64_t count) {
  TensorView out = v;
  out.data = static_cast<char*>(v.data) + begin * static_cast<int64_t>(dtype_size(v.dtype));
  out.shape = Shape{v.dim(0), count};
  return out;
}

class DebertaModel final : public BackboneModel {
 public:
  DebertaModel(const DebertaConfig& c, const BackboneShape& shape) : c_(c), shape_(shape) {
    const char* what = shape.compute != DType::F32              ? "mixed precision (bf16 / f16)"
                       : shape.adapters.enabled()               ? "LoRA / DoRA adapters"
                       : shape.packed                           ? "packed batches"
                                                                : nullptr;
    if (what)
      throw InputError(fmt::format(
          "DeBERTa (deberta-v2) does not support {} yet: train it in fp32, padded, with full "
          "fine-tuning",
          what));
  }

  void buffers(BufferTable& t) override { deberta_buffers(c_, shape_, a_, t); }

  void bind(const BoundParams& p) override {
    w_ = bind_deberta_weights(c_, p.values);
    if (shape_.training) g_ = bind_deberta_weights(c_, p.grads);
  }

  TensorView forward(const TokenInputs& in, const DropoutPlan& d) override {
    const int64_t N = in.tokens(), C = c_.hidden_size, B = in.B;
    const Shape NC{N, C}, N1{N};
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
      layer_forward(l, x, in, d);
      x = a_.layers[l].out.prefix(NC);
    }
    hidden_ = x.reshape({B, in.T, C});
    return head_forward(in, d);
  }

  void backward(TensorView dlogits, const TokenInputs& in, const DropoutPlan& d) override {
    const int64_t N = in.tokens(), C = c_.hidden_size;
    const Shape NC{N, C}, N1{N};
    head_backward(dlogits, in, d);
    fill_zero(a_.grad_rel);
    for (int64_t l = c_.num_layers - 1; l >= 0; --l) {
      const TensorView x = l > 0 ? a_.layers[l - 1].out.prefix(NC) : a_.emb_out.prefix(NC);
      // Checkpointing: the slot holds the last layer's activations; recompute the others (same
      // inputs, same Philox keys: the same bits).
      if (a_.checkpointing && l != c_.num_layers - 1) layer_forward(l, x, in, d);
      layer_backward(l, x, in, d);
      layer_gradients_final(l);  // data-parallel runs start reducing them (gradient_ready.h)
    }
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
  // The position projections: key_proj / query_proj (rows of the fused matrix) when shared.
  TensorView pos_weight(const DebertaWeights& w, int64_t l, bool key_side, bool bias) const {
    const DebertaLayerWeights& lw = w.layers[l];
    if (c_.share_att_key) {
      const TensorView fused = bias ? lw.qkv_b : lw.qkv_w;
      if (!fused.defined()) return {};
      const int64_t C = c_.hidden_size, part = key_side ? 1 : 0;
      return fused.slice0(part * C, (part + 1) * C);
    }
    return key_side ? (bias ? lw.pos_key_b : lw.pos_key_w) : (bias ? lw.pos_query_b : lw.pos_query_w);
  }

  DisentangledCall attention_call(const TokenInputs& in, const DropoutPlan& d, int64_t l) const {
    DisentangledCall call;
    call.spec = c_.attention();
    call.batch = in.B;
    call.seq = in.T;
    call.key_mask = in.mask.prefix(Shape{in.B * in.T});
    call.dropout_p = p(d, c_.attention_dropout);
    call.rng = key(d, probs_site(l));
    call.place = rows(d, in);
    call.workspace = a_.workspace;
    return call;
  }

  void layer_forward(int64_t l, TensorView x, const TokenInputs& in, const DropoutPlan& d) {
    const int64_t N = in.tokens(), C = c_.hidden_size, F = c_.intermediate_size;
    const Shape NC{N, C}, N1{N};
    const DebertaLayerWeights& lw = w_.layers[l];
    DebertaLayerActs& la = a_.layers[l];
    const TensorView qkv = la.qkv.prefix({N, 3 * C}), ctx = la.ctx.prefix(NC),
                     attn = la.attn.prefix(NC), ln1 = la.ln1.prefix(NC);
    const TensorView ffn_pre = la.ffn_pre.prefix({N, F}), ffn_act = la.ffn_act.prefix({N, F}),
                     ffn_out = la.ffn_out.prefix(NC);
    linear_forward(qkv, x, lw.qkv_w, lw.qkv_b);
    const float pr = p(d, c_.hidden_dropout);
    if (pr > 0)
      dropout_forward(la.rel_drop, rel_source(), pr, key(d, rel_site(l)),
                      DropoutRows{0, c_.rel_rows(), 0});
    const TensorView rel = rel_input(l, d);
    if (c_.c2p) linear_forward(la.pos_key, rel, pos_weight(w_, l, true, false), pos_weight(w_, l, true, true));
    if (c_.p2c)
      linear_forward(la.pos_query, rel, pos_weight(w_, l, false, false), pos_weight(w_, l, false, true));
    disentangled_attention_forward(attention_call(in, d, l), ctx, la.probs, columns(qkv, 0, C),
                                   columns(qkv, C, C), columns(qkv, 2 * C, C),
                                   c_.c2p ? la.pos_key : TensorView(),
                                   c_.p2c ? la.pos_query : TensorView());
    linear_forward(attn, ctx, lw.attn_out_w, lw.attn_out_b);
    dropout_forward(attn, attn, pr, key(d, attn_out_site(l)), rows(d, in));
    add_layer_norm_forward(ln1, la.sum1.prefix(NC), la.ln1_mean.prefix(N1), la.ln1_rstd.prefix(N1),
                           attn, x, lw.ln1_w, lw.ln1_b, c_.layer_norm_eps);
    linear_forward(ffn_pre, ln1, lw.ffn_in_w, lw.ffn_in_b);
    gelu_forward(ffn_act, ffn_pre, c_.activation);
    linear_forward(ffn_out, ffn_act, lw.ffn_out_w, lw.ffn_out_b);
    dropout_forward(ffn_out, ffn_out, pr, key(d, ffn_out_site(l)), rows(d, in));
    add_layer_norm_forward(la.out.prefix(NC), la.sum2.prefix(NC), la.ln2_mean.prefix(N1),
                           la.ln2_rstd.prefix(N1), ffn_out, ln1, lw.ln2_w, lw.ln2_b,
                           c_.layer_norm_eps);
  }

  // a_.grad_out holds dL/d(out of layer l); on return, dL/dx.
  void layer_backward(int64_t l, TensorView x, const TokenInputs& in, const DropoutPlan& d) {
    const int64_t N = in.tokens(), C = c_.hidden_size, F = c_.intermediate_size;
    const Shape NC{N, C}, N1{N};
    const DebertaLayerWeights& lw = w_.layers[l];
    const DebertaLayerWeights& lg = g_.layers[l];
    const DebertaLayerActs& la = a_.layers[l];
    const TensorView dout = a_.grad_out.prefix(NC), dsum = a_.grad_sum.prefix(NC),
                     dtmp = a_.grad_tmp.prefix(NC), dctx = a_.grad_ctx.prefix(NC),
                     dffn = a_.grad_ffn.prefix({N, F}), dqkv = a_.grad_qkv.prefix({N, 3 * C});
    const float pr = p(d, c_.hidden_dropout);
    layer_norm_backward(dsum, lg.ln2_w, lg.ln2_b, dout, la.sum2.prefix(NC), lw.ln2_w,
                        la.ln2_mean.prefix(N1), la.ln2_rstd.prefix(N1));
    dropout_backward(dtmp, dsum, pr, key(d, ffn_out_site(l)), rows(d, in));
    linear_backward(dffn, lg.ffn_out_w, lg.ffn_out_b, dtmp, la.ffn_act.prefix({N, F}), lw.ffn_out_w);
    gelu_backward(dffn, la.ffn_pre.prefix({N, F}), dffn, c_.activation);
    linear_backward(dsum, lg.ffn_in_w, lg.ffn_in_b, dffn, la.ln1.prefix(NC), lw.ffn_in_w,
                    /*accumulate_dinp=*/true);
    layer_norm_backward(dout, lg.ln1_w, lg.ln1_b, dsum, la.sum1.prefix(NC), lw.ln1_w,
                        la.ln1_mean.prefix(N1), la.ln1_rstd.prefix(N1));
    dropout_backward(dtmp, dout, pr, key(d, attn_out_site(l)), rows(d, in));
    linear_backward(dctx, lg.attn_out_w, lg.attn_out_b, dtmp, la.ctx.prefix(NC), lw.attn_out_w);
    const TensorView qkv = la.qkv.prefix({N, 3 * C});
    disentangled_attention_backward(
        attention_call(in, d, l), columns(dqkv, 0, C), columns(dqkv, C, C), columns(dqkv, 2 * C, C),
        c_.c2p ? a_.grad_pos_key : TensorView(), c_.p2c ? a_.grad_pos_query : TensorView(), dctx,
        columns(qkv, 0, C), columns(qkv, C, C), columns(qkv, 2 * C, C),
        c_.c2p ? la.pos_key : TensorView(), c_.p2c ? la.pos_query : TensorView(), la.probs);
    // The position projections: their weights' gradients, and the relative embeddings' (summed
    // over the layers in grad_rel).
    const TensorView rel = rel_input(l, d);
    const TensorView drel = g_.rel.defined() ? a_.grad_rel_drop : TensorView();
    if (c_.c2p)
      linear_backward(drel, pos_weight(g_, l, true, false), pos_weight(g_, l, true, true),
                      a_.grad_pos_key, rel, pos_weight(w_, l, true, false));
    if (c_.p2c)
      linear_backward(drel, pos_weight(g_, l, false, false), pos_weight(g_, l, false, true),
                      a_.grad_pos_query, rel, pos_weight(w_, l, false, false),
                      /*accumulate_dinp=*/c_.c2p);
    if (drel.defined() && (c_.c2p || c_.p2c)) {
      dropout_backward(drel, drel, pr, key(d, rel_site(l)), DropoutRows{0, c_.rel_rows(), 0});
      residual_forward(a_.grad_rel, a_.grad_rel, drel);
    }
    // dx = the residual part (in dout) + the QKV input gradient.
    linear_backward(dout, lg.qkv_w, lg.qkv_b, dqkv, x, lw.qkv_w, /*accumulate_dinp=*/true);
  }

  TensorView head_forward(const TokenInputs& in, const DropoutPlan& d) {
    const int64_t B = in.B, C = c_.hidden_size, K = c_.num_labels();
    const Shape BC{B, C};
    const TensorView cls = a_.cls.prefix(BC), cls_drop = a_.cls_drop.prefix(BC),
                     pre = a_.pool_pre.prefix(BC), pooled = a_.pooled.prefix(BC),
                     pooled_drop = a_.pooled_drop.prefix(BC), logits = a_.logits.prefix({B, K});
    first_token_forward(cls, hidden_);
    dropout_forward(cls_drop, cls, p(d, c_.pooler_dropout), key(d, head_input_dropout_site()),
                    DropoutRows{d.row0, 1, 1});
    linear_forward(pre, cls_drop, w_.pool_w, w_.pool_b);
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

  // dlogits -> a_.grad_out (B, T, C): zero but at the first tokens.
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
    linear_backward(ga, g_.pool_w, g_.pool_b, gb, a_.cls_drop.prefix(BC), w_.pool_w);
    dropout_backward(ga, ga, p(d, c_.pooler_dropout), key(d, head_input_dropout_site()),
                     DropoutRows{d.row0, 1, 1});
    first_token_backward(a_.grad_out.prefix({B, in.T, C}), ga);
  }

  DebertaConfig c_;
  BackboneShape shape_;
  DebertaWeights w_, g_;
  DebertaActs a_;
  TensorView hidden_;
};

}  // namespace

std::unique_ptr<BackboneModel> make_deberta_model(const DebertaConfig& config,
                                                  const BackboneShape& shape) {
  return std::make_unique<DebertaModel>(config, shape);
}

}  // namespace ftune
