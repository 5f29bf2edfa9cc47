// The encoder's activation and workspace buffers: one table (core/buffer_table.h) lists each
// buffer with the views it binds, so the plan and the binding come from the same list. Training
// keeps every layer (with checkpointing: every layer's output, the rest in one slot); inference
// alternates two slots (a layer reads the other's output). Sizes follow the tokens of a batch
// (padded: rows x longest row; packed: the token budget), so a packed batch plans no padding; the
// first-token form's last layer (encoder.h) plans its rows past attention for the rows' first
// tokens where no other layer shares its buffers.
#include <fmt/format.h>

#include <algorithm>

#include "models/adapters.h"
#include "models/bert/encoder.h"
#include "models/layers/layer_stack.h"
#include "ops/attention.h"
#include "ops/embedding.h"

namespace ftune {
namespace {

std::string act_name(int64_t slot, const char* what) {
  return fmt::format("act/layer{}/{}", slot, what);
}

// The sites with an adapter in any layer (their activations are planned per slot).
std::array<bool, kEncoderSites> adapted_sites(const EncoderConfig& c, const AdapterConfig& ac) {
  std::array<bool, kEncoderSites> on{};
  for (const AdapterSite& s : targeted_sites(encoder_adapter_sites(c), ac)) on[s.kind] = true;
  return on;
}

int64_t site_out(const EncoderConfig& c, int i) {
  return static_cast<EncoderSite>(i) == EncoderSite::FfnIn ? c.intermediate_size : c.hidden_size;
}

}  // namespace

void encoder_buffers(const EncoderConfig& c, const BackboneShape& how, EncoderActivations& a,
                     BufferTable& t) {
  const int64_t N = how.max_tokens > 0 ? how.max_tokens : how.max_rows * how.max_seq;
  const int64_t C = c.hidden_size, F = c.intermediate_size, T = how.max_seq;
  const DType f32 = DType::F32;
  // Mixed precision: the GEMMs' inputs and outputs (and their gradients) in the compute type.
  const DType h = how.compute;
  const bool mixed = h != f32, training = how.training;
  const bool ckpt = training && how.checkpointing == GradientCheckpointing::On;
  // cuDNN's flash attention keeps its softmax statistics, not the probabilities.
  const bool cudnn = uses_cudnn_attention(how.attention, how.device, h);
  a = EncoderActivations{};
  a.checkpointing = ckpt;
  a.compute = h;
  a.cudnn_attention = cudnn;
  a.first_token_last = how.first_token_head;
  a.layers.resize(c.num_layers);

  t.add("act/emb/sum", f32, {N, C}, &a.emb_sum);
  t.add("act/emb/mean", f32, {N}, &a.emb_mean);
  t.add("act/emb/rstd", f32, {N}, &a.emb_rstd);
  t.add("act/emb/out", f32, {N, C}, &a.emb_out);
  if (mixed) t.add("act/emb/out_h", h, {N, C}, &a.emb_out_h);
  const LayerSlots slots(c.num_layers, training, ckpt);  // models/layers/layer_stack.h
  const std::array<bool, kEncoderSites> sites = adapted_sites(c, how.adapters);
  auto slot_buffer = [&](int64_t s, const char* what, DType dtype, Shape shape,
                         TensorView LayerActivations::*view) {
    slots.add(t, a.layers, s, act_name(s, what), dtype, shape, view);
  };
  // The op's saved state per layer slot (probabilities, or cuDNN's statistics) and its scratch:
  // packed rows keep each row's probabilities at its tokens (ops/attention.h), no padding.
  const AttentionBuffers attention = attention_buffers(encoder_attention_spec(c), how.device, cudnn,
                                                       how.max_rows, N, T, training,
                                                       how.max_token_positions);
  // Rows past attention: N, or in a slot that only the first-token form's last layer uses, its
  // first tokens (max_rows).
  const int64_t first_rows = std::min(N, how.max_rows);
  const auto last_only = [&](int64_t s) {
    bool only = a.first_token_last;
    slots.each(s, [&](int64_t l) { only = only && l == c.num_layers - 1; });
    return only;
  };
  for (int64_t s = 0; s < slots.count(); ++s) {
    const int64_t R = last_only(s) ? first_rows : N;
    slot_buffer(s, "qkv", h, {N, 3 * C}, &LayerActivations::qkv);
    slot_buffer(s, "probs", f32, {attention.saved}, &LayerActivations::probs);
    slot_buffer(s, "ctx", h, {N, C}, &LayerActivations::ctx);
    slot_buffer(s, "attn", h, {R, C}, &LayerActivations::attn);
    slot_buffer(s, "sum1", f32, {R, C}, &LayerActivations::sum1);
    slot_buffer(s, "ln1", f32, {R, C}, &LayerActivations::ln1);
    if (mixed) slot_buffer(s, "ln1_h", h, {R, C}, &LayerActivations::ln1_h);
    slot_buffer(s, "ln1_mean", f32, {R}, &LayerActivations::ln1_mean);
    slot_buffer(s, "ln1_rstd", f32, {R}, &LayerActivations::ln1_rstd);
    slot_buffer(s, "ffn_pre", h, {R, F}, &LayerActivations::ffn_pre);
    slot_buffer(s, "ffn_act", h, {R, F}, &LayerActivations::ffn_act);
    slot_buffer(s, "ffn_out", h, {R, C}, &LayerActivations::ffn_out);
    slot_buffer(s, "sum2", f32, {R, C}, &LayerActivations::sum2);
    if (!ckpt) slot_buffer(s, "out", f32, {R, C}, &LayerActivations::out);
    // The 16-bit copy of a layer's output feeds the next layer (none after the first-token form's).
    if (!ckpt && mixed && !last_only(s))
      slot_buffer(s, "out_h", h, {N, C}, &LayerActivations::out_h);
    slot_buffer(s, "ln2_mean", f32, {R}, &LayerActivations::ln2_mean);
    slot_buffer(s, "ln2_rstd", f32, {R}, &LayerActivations::ln2_rstd);
    for (int i = 0; i < kEncoderSites; ++i) {
      if (!sites[i]) continue;
      std::vector<AdapterSiteBuffers*> views;
      slots.each(s, [&](int64_t l) { views.push_back(&a.layers[l].adapter[i]); });
      const bool qkv_site = i <= static_cast<int>(EncoderSite::Value);  // every token's
      add_adapter_site_buffers(t, act_name(s, fmt::format("lora_u{}", i).c_str()),
                               act_name(s, fmt::format("dora_z{}", i).c_str()), qkv_site ? N : R,
                               site_out(c, i), how.adapters, views);
    }
  }
  if (ckpt)
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const bool first = a.first_token_last && l == c.num_layers - 1;
      t.add(act_name(l, "out"), f32, {first ? first_rows : N, C}, &a.layers[l].out);
    }
  // Checkpointing keeps only the fp32 layer outputs; their 16-bit copies alternate between two
  // slots (layer l writes slot (l + 1) % 2 and reads slot l % 2), and backward re-casts a layer's
  // input before recomputing it.
  if (ckpt && mixed) {
    const int64_t writers = a.first_token_last ? c.num_layers - 1 : c.num_layers;
    const int64_t copies = std::min<int64_t>(2, writers);
    for (int64_t s = 0; s < copies; ++s) t.add(fmt::format("act/ckpt/out_h{}", s), h, {N, C});
    for (int64_t l = 0; l < writers; ++l)
      t.also(fmt::format("act/ckpt/out_h{}", (l + 1) % copies), &a.layers[l].out_h);
  }
  if (a.first_token_last) {
    t.add("act/first_token/ctx", h, {how.max_rows, C}, &a.first_ctx);
    t.add("act/first_token/x", f32, {how.max_rows, C}, &a.first_x);
    if (training) t.add("gradact/first_token/ctx", h, {how.max_rows, C}, &a.first_dctx);
  }
  if (training) {
    t.add("gradact/out", f32, {N, C}, &a.grad_out);
    t.add("gradact/sum", f32, {N, C}, &a.grad_sum);
    t.add("gradact/tmp", h, {N, C}, &a.grad_tmp);
    t.add("gradact/ctx", h, {N, C}, &a.grad_ctx);
    t.add("gradact/ffn", h, {N, F}, &a.grad_ffn);
    t.add("gradact/qkv", h, {N, 3 * C}, &a.grad_qkv);
    add_adapter_h(t, "gradact/lora_h", N, how.adapters, a.adapter_scratch);
  }
  add_adapter_dropout(t, "work/lora_dropout", {N, std::max(C, F)}, how.adapters, a.adapter_scratch);
  if (mixed && how.adapters.enabled()) {
    // fp32 copies for the LoRA branches: inputs that are 16-bit (attention output, FFN in and out;
    // the QKV input is the fp32 layer input), outputs (all 16-bit), and 16-bit input gradients
    // (attention output: dctx, FFN out: dffn), each as wide as the widest adapted site needs.
    std::vector<AdapterStageNeed> needs;
    for (int i = 0; i < kEncoderSites; ++i) {
      if (!sites[i]) continue;
      const EncoderSite site = static_cast<EncoderSite>(i);
      const int64_t in = site == EncoderSite::FfnOut ? F : C;
      const bool x16 = site == EncoderSite::AttnOut || site == EncoderSite::FfnIn ||
                       site == EncoderSite::FfnOut;
      const bool dx16 = site == EncoderSite::AttnOut || site == EncoderSite::FfnOut;
      needs.push_back({x16 ? N * in : 0, N * site_out(c, i), dx16 ? N * in : 0});
    }
    add_adapter_stages(t, "work/", needs, training, a.adapter_scratch);
  }
  // Kernel scratch, as the target device's kernels use it: on the CPU per-thread attention scores
  // (compute_threads() of them); on CUDA the attention backward's row sums of every (b, h) pair
  // (ops/attention.h), plus, when 16-bit attention runs through cuDNN, its workspace
  // (ops/attention_cudnn.h). The embeddings' backward reuses it after the layers, sorting the
  // tokens by id there (ops/embedding.h); LayerNorm needs none (a fixed-order column reduction).
  int64_t ws = attention.workspace;
  if (training) ws = std::max(ws, embedding_backward_workspace(how.device, N, C));
  t.add("work/encoder", f32, {ws}, &a.workspace);
}

}  // namespace ftune
