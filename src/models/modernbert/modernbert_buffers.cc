// ModernBERT's activation and workspace buffers (see modernbert.h), listed once in a BufferTable:
// training keeps every layer's activations for the backward pass (with gradient checkpointing
// only the layer outputs, and one slot recomputed per layer), inference alternates two slots. Sizes follow the batch's tokens (padded rows x longest row, or the packed budget).
#include <fmt/format.h>

#include "models/adapters.h"
#include "models/layers/layer_stack.h"
#include "models/modernbert/modernbert.h"
#include "ops/embedding.h"

namespace ftune {

AttentionSpec modernbert_attention_spec(const ModernBertConfig& c, int64_t layer) {
  AttentionSpec s;
  s.heads = s.kv_heads = c.num_heads;
  s.head_dim = c.head_dim;
  s.causal = false;
  if (!c.global[layer]) s.window = hf_local_attention(c.local_attention);
  s.scale = default_attention_scale(c.head_dim);
  return s;
}

void modernbert_buffers(const ModernBertConfig& c, const BackboneShape& how, ModernBertActs& a,
                        BufferTable& t) {
  const int64_t N = how.max_tokens > 0 ? how.max_tokens : how.max_rows * how.max_seq;
  const int64_t B = how.max_rows, C = c.hidden_size, F = c.intermediate_size, K = c.num_labels();
  const DType f32 = DType::F32, h = how.compute;  // h: the GEMMs' activations
  const bool training = how.training, mixed = h != f32;
  a = ModernBertActs{};
  a.compute = h;
  a.layers.resize(c.num_layers);
  std::array<bool, kModernBertSites> adapted{};
  bool head_adapted = false;
  for (const AdapterSite& s : targeted_sites(modernbert_adapter_sites(c), how.adapters)) {
    if (s.layer == c.num_layers) head_adapted = true;
    else adapted[s.kind] = true;
  }
  const int64_t outs[kModernBertSites] = {3 * C, C, 2 * F, C};

  t.add("act/mb/emb", f32, {N, C}, &a.emb);
  t.add("act/mb/emb_mean", f32, {N}, &a.emb_mean);
  t.add("act/mb/emb_rstd", f32, {N}, &a.emb_rstd);
  t.add("act/mb/x0", f32, {N, C}, &a.x0);
  // Probabilities of the widest attention (a window does not change the planned size).
  const AttentionBuffers attention = attention_buffers(modernbert_attention_spec(c, 0), how.device,
                                                       false, B, N, how.max_seq, training,
                                                       how.max_token_positions);
  // Gradient checkpointing: one slot of layer activations, recomputed layer by layer in backward
  // from the layer inputs, which are kept (each layer's `out`).
  a.recompute = training && how.checkpointing == GradientCheckpointing::On;
  const LayerSlots slots(c.num_layers, training, a.recompute);  // models/layers/layer_stack.h
  for (int64_t s = 0; s < slots.count(); ++s) {
    auto add = [&](const char* what, DType dtype, Shape shape,
                   TensorView ModernBertLayerActs::*view) {
      slots.add(t, a.layers, s, fmt::format("act/mb{}/{}", s, what), dtype, shape, view);
    };
    add("mean1", f32, {N}, &ModernBertLayerActs::mean1);
    add("rstd1", f32, {N}, &ModernBertLayerActs::rstd1);
    add("h1", h, {N, C}, &ModernBertLayerActs::h1);
    add("qkv", h, {N, 3 * C}, &ModernBertLayerActs::qkv);
    add("probs", f32, {attention.saved}, &ModernBertLayerActs::probs);
    add("ctx", h, {N, C}, &ModernBertLayerActs::ctx);
    add("x1", f32, {N, C}, &ModernBertLayerActs::x1);
    add("mean2", f32, {N}, &ModernBertLayerActs::mean2);
    add("rstd2", f32, {N}, &ModernBertLayerActs::rstd2);
    add("h2", h, {N, C}, &ModernBertLayerActs::h2);
    add("gu", h, {N, 2 * F}, &ModernBertLayerActs::gu);
    add("m", h, {N, F}, &ModernBertLayerActs::m);
    if (!a.recompute) add("out", f32, {N, C}, &ModernBertLayerActs::out);
    for (int i = 0; i < kModernBertSites; ++i) {
      if (!adapted[i]) continue;
      std::vector<AdapterSiteBuffers*> views;
      slots.each(s, [&](int64_t l) { views.push_back(&a.layers[l].adapter[i]); });
      add_adapter_site_buffers(t, fmt::format("act/mb{}/lora_u{}", s, i),
                               fmt::format("act/mb{}/dora_z{}", s, i), N, outs[i], how.adapters,
                               views);
    }
  }
  if (a.recompute)
    for (int64_t l = 0; l < c.num_layers; ++l)
      t.add(fmt::format("act/mb/out{}", l), f32, {N, C}, &a.layers[l].out);
  t.add("act/mb/tmp", h, {N, C}, &a.tmp);
  if (mixed) t.add("work/mb/stage0", f32, {N * 2 * C}, &a.stage0);  // LayerNorm out, RoPE's q | k
  t.add("act/mb/final_mean", f32, {N}, &a.final_mean);
  t.add("act/mb/final_rstd", f32, {N}, &a.final_rstd);
  t.add("act/mb/hidden", f32, {N, C}, &a.hidden);
  const std::initializer_list<std::pair<const char*, TensorView*>> head = {
      {"pooled", &a.pooled}, {"z", &a.z}, {"g", &a.g}, {"p", &a.p}, {"p_drop", &a.p_drop}};
  for (const auto& [name, view] : head)
    t.add(fmt::format("act/mb/head_{}", name), f32, {B, C}, view);
  t.add("act/mb/head_mean", f32, {B}, &a.head_mean);
  t.add("act/mb/head_rstd", f32, {B}, &a.head_rstd);
  t.add("act/mb/logits", f32, {B, K}, &a.logits);
  if (head_adapted)
    add_adapter_site_buffers(t, "act/mb/head_lora_u", "act/mb/head_dora_z", B, C, how.adapters,
                             {&a.head_adapter});
  t.add("act/mb/global_inv_freq", f32, {c.head_dim / 2}, &a.global_inv_freq);
  t.add("act/mb/local_inv_freq", f32, {c.head_dim / 2}, &a.local_inv_freq);
  if (training) {
    t.add("gradact/mb/dx", f32, {N, C}, &a.dx);
    t.add("gradact/mb/dtmp", f32, {N, C}, &a.dtmp);
    t.add("gradact/mb/dh", f32, {N, C}, &a.dh);
    // Mixed precision: the 16-bit gradients are those of 16-bit GEMM outputs (dctx, dqkv, dgu)
    // and dy_h, dx's copy for the output GEMMs; dh and dm, GEMM input gradients, stay fp32.
    t.add("gradact/mb/dctx", h, {N, C}, &a.dctx);
    t.add("gradact/mb/dqkv", h, {N, 3 * C}, &a.dqkv);
    t.add("gradact/mb/dgu", h, {N, 2 * F}, &a.dgu);
    t.add("gradact/mb/dm", f32, {N, F}, &a.dm);
    if (mixed) t.add("gradact/mb/dy_h", h, {N, C}, &a.dy_h);
    t.add("gradact/mb/db1", f32, {B, C}, &a.db1);
    t.add("gradact/mb/db2", f32, {B, C}, &a.db2);
    add_adapter_h(t, "gradact/mb/lora_h", std::max(N, B), how.adapters, a.adapter_scratch);
  }
  add_adapter_dropout(t, "work/mb/lora_dropout", {std::max(N, B), std::max(C, F)}, how.adapters,
                      a.adapter_scratch);
  if (mixed && how.adapters.enabled()) {
    // fp32 copies for the layers' LoRA branches: their 16-bit inputs (h1, ctx, h2, m) and outputs,
    // and the 16-bit input gradient (AttnWo's, dctx), as wide as the widest adapted site needs.
    const int64_t ins[kModernBertSites] = {C, C, C, F};
    std::vector<AdapterStageNeed> needs;
    for (int i = 0; i < kModernBertSites; ++i)
      if (adapted[i])
        needs.push_back({N * ins[i], N * outs[i],
                         i == static_cast<int>(ModernBertSite::AttnWo) ? N * C : 0});
    add_adapter_stages(t, "work/mb/", needs, training, a.adapter_scratch);
  }
  // The embedding's backward sorts the tokens by id there after the layers (ops/embedding.h).
  const int64_t ws = std::max<int64_t>(
      {attention.workspace, training ? embedding_backward_workspace(how.device, N, C) : 0, 1});
  t.add("work/mb", f32, {ws}, &a.workspace);
}

}  // namespace ftune
