// The decoder's activation and workspace buffers (see decoder.h), listed once in a BufferTable:
// training keeps every layer's activations for the backward pass (with checkpointing only their
// outputs, the rest in one slot), inference alternates two slots; under mixed precision the GEMMs'
// activations are in the compute type. Sizes follow the batch's tokens (padded rows x longest row, or the packed budget).
#include <fmt/format.h>

#include "models/adapters.h"
#include "models/decoder/decoder.h"
#include "models/layers/layer_stack.h"
#include "ops/embedding.h"
#include "ops/rms_norm.h"

namespace ftune {

AttentionSpec decoder_attention_spec(const DecoderConfig& c, int64_t layer) {
  AttentionSpec s;
  s.heads = c.num_heads;
  s.kv_heads = c.num_kv_heads;
  s.head_dim = c.head_dim;
  s.causal = true;
  if (c.window[layer] > 0) s.window = hf_sliding_window(c.window[layer]);
  s.scale = c.attention_scale;
  s.softcap = c.softcap;
  return s;
}

void decoder_buffers(const DecoderConfig& c, const BackboneShape& how, DecoderActs& a,
                     BufferTable& t) {
  const int64_t N = how.max_tokens > 0 ? how.max_tokens : how.max_rows * how.max_seq;
  const int64_t B = how.max_rows, C = c.hidden_size, F = c.intermediate_size;
  const int64_t Q = c.q_size(), KV = c.kv_size(), QKV = c.qkv_size(), K = c.num_labels();
  const DType f32 = DType::F32, h = how.compute;  // h: the GEMMs' activations
  const bool training = how.training, mixed = h != f32;
  const bool ckpt = training && how.checkpointing == GradientCheckpointing::On;
  a = DecoderActs{};
  a.layers.resize(c.num_layers);
  a.compute = h;
  a.checkpointing = ckpt;
  std::array<bool, kDecoderSites> adapted{};
  for (const AdapterSite& s : targeted_sites(decoder_adapter_sites(c), how.adapters))
    adapted[s.kind] = true;
  const int64_t outs[kDecoderSites] = {Q, KV, KV, C, F, F, C};
  const int64_t ins[kDecoderSites] = {C, C, C, Q, C, C, F};

  t.add("act/dec/x0", f32, {N, C}, &a.x0);
  // Probabilities of the widest attention (the spec's window does not change the planned size).
  const AttentionBuffers attention = attention_buffers(decoder_attention_spec(c, 0), how.device,
                                                       false, B, N, how.max_seq, training,
                                                       how.max_token_positions);
  // Training keeps every layer (checkpointing: every layer's output, the rest in one slot);
  // inference alternates two slots.
  const LayerSlots slots(c.num_layers, training, ckpt);  // models/layers/layer_stack.h
  for (int64_t s = 0; s < slots.count(); ++s) {
    auto add = [&](const char* what, DType dtype, Shape shape, TensorView DecoderLayerActs::*view) {
      slots.add(t, a.layers, s, fmt::format("act/dec{}/{}", s, what), dtype, shape, view);
    };
    add("h1", h, {N, C}, &DecoderLayerActs::h1);
    add("rstd1", f32, {N}, &DecoderLayerActs::rstd1);
    add("qkv", h, {N, QKV}, &DecoderLayerActs::qkv);
    if (c.qk_norm) {
      add("qkv_raw", h, {N, QKV}, &DecoderLayerActs::qkv_raw);
      add("rstd_q", f32, {N * c.num_heads}, &DecoderLayerActs::rstd_q);
      add("rstd_k", f32, {N * c.num_kv_heads}, &DecoderLayerActs::rstd_k);
    } else {
      slots.each(s, [&](int64_t l) {
        t.also(fmt::format("act/dec{}/qkv", s), &a.layers[l].qkv_raw);
      });
    }
    add("probs", f32, {attention.saved}, &DecoderLayerActs::probs);
    add("ctx", h, {N, Q}, &DecoderLayerActs::ctx);
    if (c.sandwich_norms) {  // Gemma's norms on the branch outputs (fp32, as the residual stream)
      add("attn_out", f32, {N, C}, &DecoderLayerActs::attn_out);
      add("rstd_ao", f32, {N}, &DecoderLayerActs::rstd_ao);
      add("mlp_out", f32, {N, C}, &DecoderLayerActs::mlp_out);
      add("rstd_mo", f32, {N}, &DecoderLayerActs::rstd_mo);
    }
    add("x1", f32, {N, C}, &DecoderLayerActs::x1);
    add("rstd2", f32, {N}, &DecoderLayerActs::rstd2);
    add("h2", h, {N, C}, &DecoderLayerActs::h2);
    add("gu", h, {N, 2 * F}, &DecoderLayerActs::gu);
    add("m", h, {N, F}, &DecoderLayerActs::m);
    if (!ckpt) add("out", f32, {N, C}, &DecoderLayerActs::out);
    for (int i = 0; i < kDecoderSites; ++i) {
      if (!adapted[i]) continue;
      std::vector<AdapterSiteBuffers*> views;
      slots.each(s, [&](int64_t l) { views.push_back(&a.layers[l].adapter[i]); });
      add_adapter_site_buffers(t, fmt::format("act/dec{}/lora_u{}", s, i),
                               fmt::format("act/dec{}/dora_z{}", s, i), N, outs[i], how.adapters,
                               views);
    }
  }
  if (ckpt)
    for (int64_t l = 0; l < c.num_layers; ++l)
      t.add(fmt::format("act/dec{}/out", l), f32, {N, C}, &a.layers[l].out);
  t.add("act/dec/tmp", h, {N, C}, &a.tmp);
  if (mixed) {
    const int64_t wide = N * std::max(C, Q + KV);  // the gate reads 16 bits itself (ops/glu.h)
    t.add("work/dec/stage0", f32, {wide}, &a.stage0);
    t.add("work/dec/stage1", f32, {wide}, &a.stage1);
  }
  t.add("act/dec/final_rstd", f32, {N}, &a.final_rstd);
  t.add("act/dec/hidden", f32, {N, C}, &a.hidden);
  if (!c.causal_lm) {  // a causal LM stops at hidden (its loss plans the head's blocks)
    t.add("act/dec/pool_index", DType::I32, {B}, &a.pool_index);
    t.add("act/dec/pooled", f32, {B, C}, &a.pooled);
    t.add("act/dec/logits", f32, {B, K}, &a.logits);
  }
  t.add("act/dec/inv_freq", f32, {c.rope.rotary_dim(c.head_dim) / 2}, &a.inv_freq);
  if (c.rope.type == "longrope")
    t.add("act/dec/inv_freq_long", f32, {c.rope.rotary_dim(c.head_dim) / 2}, &a.inv_freq_long);
  if (c.two_ropes())
    t.add("act/dec/inv_freq_local", f32, {c.local_rope.rotary_dim(c.head_dim) / 2}, &a.inv_freq_local);
  if (training) {
    // Mixed precision: the 16-bit gradients are those of 16-bit GEMM outputs (dctx, dqkv, dgu) and
    // dy_h, dx's copy for the o / down GEMMs; dh and dm, GEMM input gradients, stay fp32.
    t.add("gradact/dec/dx", f32, {N, C}, &a.dx);
    t.add("gradact/dec/dtmp", f32, {N, C}, &a.dtmp);
    t.add("gradact/dec/dh", f32, {N, C}, &a.dh);
    t.add("gradact/dec/dctx", h, {N, Q}, &a.dctx);
    t.add("gradact/dec/dqkv", h, {N, QKV}, &a.dqkv);
    t.add("gradact/dec/dgu", h, {N, 2 * F}, &a.dgu);
    t.add("gradact/dec/dm", f32, {N, F}, &a.dm);
    if (mixed) t.add("gradact/dec/dy_h", h, {N, C}, &a.dy_h);
    if (!c.causal_lm) t.add("gradact/dec/dpooled", f32, {B, C}, &a.dpooled);
    add_adapter_h(t, "gradact/dec/lora_h", N, how.adapters, a.adapter_scratch);
  }
  add_adapter_dropout(t, "work/dec/lora_dropout", {N, std::max({C, F, Q})}, how.adapters,
                      a.adapter_scratch);
  if (mixed && how.adapters.enabled()) {
    // fp32 copies for the LoRA branches: their 16-bit inputs and outputs, and the one 16-bit input
    // gradient (o_proj's, dctx), each as wide as the widest adapted site needs.
    std::vector<AdapterStageNeed> needs;
    for (int i = 0; i < kDecoderSites; ++i)
      if (adapted[i])
        needs.push_back({N * ins[i], N * outs[i], i == static_cast<int>(DecoderSite::O) ? N * Q : 0});
    add_adapter_stages(t, "work/dec/", needs, training, a.adapter_scratch);
  }
  // The embedding's backward sorts the tokens by id there after the layers (ops/embedding.h).
  const int64_t ws = std::max<int64_t>(
      {attention.workspace, rms_norm_backward_workspace(how.device, std::max(C, c.head_dim)),
       training ? embedding_backward_workspace(how.device, N, C) : 0, 1});
  t.add("work/dec", f32, {ws}, &a.workspace);
}

}  // namespace ftune
