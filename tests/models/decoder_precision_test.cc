// The decoder family (Llama, Qwen3 and Gemma 1 / 2 / 3's golden fixtures: GQA, odd head dims, q / k
// norms, biases, Gemma's scaled embeddings, sandwich norms and soft-cap)
// under mixed precision and gradient checkpointing, with attention dropout on: bf16 logits and
// loss follow the fp32 model within the DESIGN's bf16 tolerance (2e-2), every parameter gradient
// within 8e-2 of its tensor's largest (f16: 1e-2), and so do
// LoRA (frozen base stored only in bf16 / f16) and DoRA (fp32 master, 16-bit shadow) on every
// linear layer with adapter dropout; gradient checkpointing gives bit-identical losses and
// gradients (fp32 and bf16) and the memory planner counts it (activations drop, the layers'
// probabilities as attention); bf16 activations take less memory than fp32; the frozen embedding
// table stored in 16 bits (LoRA) gives the bits of its rounded values held in fp32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "adapter_init.h"
#include "golden_fixture.h"
#include "precision_compare.h"
#include "models/hf_checkpoint.h"
#include "train/memory_planner.h"

namespace ftune::test {
namespace {

const std::vector<std::string> kAllLinear = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                             "gate_proj", "up_proj", "down_proj"};

AdapterConfig adapters(PeftMethod method) {
  AdapterConfig a;
  a.method = method;
  a.r = 4;
  a.alpha = 8;
  a.dropout = 0.1f;
  a.target_modules = kAllLinear;
  return a;
}

ModelSpec spec(const GoldenCase& c) {
  DropoutRates rates;
  rates.attention = 0.1f;
  return load_model_spec(c.model_dir).with_dropout(rates);
}

using Model = PrecisionModel;

Model build(const GoldenCase& c, DType compute, GradientCheckpointing ckpt,
            PeftMethod method = PeftMethod::None) {
  return build_precision_model(c, spec(c), compute, ckpt,
                               method == PeftMethod::None ? AdapterConfig{} : adapters(method));
}

std::vector<float> step(Model& r) { return two_micro_steps(*r.clf); }

class DecoderPrecision : public ::testing::TestWithParam<std::string> {};

TEST_P(DecoderPrecision, Bf16FollowsFp32AndCheckpointingIsBitIdentical) {
  const GoldenCase c = GoldenCase::load(GetParam());
  Model f32 = build(c, DType::F32, GradientCheckpointing::Off);
  Model bf = build(c, DType::BF16, GradientCheckpointing::Off);
  Model bf_ckpt = build(c, DType::BF16, GradientCheckpointing::On);
  const std::vector<float> l32 = step(f32), l16 = step(bf), l16c = step(bf_ckpt);
  for (size_t i = 0; i < l32.size(); ++i) {
    EXPECT_NEAR(l16[i], l32[i], 2e-2 * std::fabs(l32[i]));
    EXPECT_NE(l16[i], l32[i]);  // the bf16 path really ran
  }
  EXPECT_LE(rel(to_vector(bf.clf->logits()), to_vector(f32.clf->logits())), 2e-2);
  // Per tensor, relative to its largest gradient: bf16 within 8e-2 (the worst, Llama's layer-0
  // gate_proj, 7e-2), f16 within 1e-2, as their 8 and 11 significant bits predict (rounding, not
  // a wrong term, which would not shrink with f16).
  expect_grads_follow(bf, f32, 8e-2, "bf16");
  Model f16 = build(c, DType::F16, GradientCheckpointing::Off);
  step(f16);
  expect_grads_follow(f16, f32, 1e-2, "f16");
  EXPECT_EQ(l16, l16c);
  EXPECT_EQ(to_vector(bf.clf->trainable_grads()), to_vector(bf_ckpt.clf->trainable_grads()));
  EXPECT_LT(bf.act_bytes, f32.act_bytes);
  EXPECT_LT(bf_ckpt.act_bytes, bf.act_bytes);
}

// LoRA keeps the frozen base only in 16 bits; DoRA keeps the fp32 master and its 16-bit shadow.
TEST_P(DecoderPrecision, AdaptersFollowFp32AndCheckpointingIsBitIdentical) {
  const GoldenCase c = GoldenCase::load(GetParam());
  for (PeftMethod method : {PeftMethod::Lora, PeftMethod::Dora}) {
    Model f32 = build(c, DType::F32, GradientCheckpointing::Off, method);
    const std::vector<float> l32 = step(f32);
    const std::vector<float> g32 = to_vector(f32.clf->trainable_grads());
    for (DType compute : {DType::BF16, DType::F16}) {
      const std::string what = std::string(method == PeftMethod::Lora ? "lora " : "dora ") +
                               (compute == DType::BF16 ? "bf16" : "f16");
      Model h = build(c, compute, GradientCheckpointing::Off, method);
      Model hc = build(c, compute, GradientCheckpointing::On, method);
      EXPECT_EQ(h.clf->frozen_16bit(), method == PeftMethod::Lora) << what;
      const std::vector<float> l16 = step(h), l16c = step(hc);
      for (size_t i = 0; i < l32.size(); ++i) {
        EXPECT_NEAR(l16[i], l32[i], 2e-2 * std::fabs(l32[i])) << what;
        EXPECT_NE(l16[i], l32[i]) << what;
      }
      expect_grads_follow(h, f32, 8e-2, what);
      const std::vector<float> g16 = to_vector(h.clf->trainable_grads());
      EXPECT_NE(g16, g32) << what;
      EXPECT_EQ(l16, l16c) << what;
      EXPECT_EQ(g16, to_vector(hc.clf->trainable_grads())) << what;
    }
  }
}

// LoRA with a 16-bit base stores the frozen embedding table in 16 bits too: the run equals, bit for
// bit (logits, losses, every trained gradient), the run whose fp32 table holds the same rounded
// values, and the plan's parameters are smaller by half the table.
TEST_P(DecoderPrecision, SixteenBitEmbeddingTableEqualsItsValuesInFp32) {
  const GoldenCase c = GoldenCase::load(GetParam());
  for (DType compute : {DType::BF16, DType::F16}) {
    const std::string what(dtype_name(compute));
    Model h = build_precision_model(c, spec(c), compute, GradientCheckpointing::Off,
                                    adapters(PeftMethod::Lora));
    Model r = build_precision_model(c, spec(c), compute, GradientCheckpointing::Off,
                                    adapters(PeftMethod::Lora), /*embeddings_16bit=*/false);
    std::string name;
    for (const ParamSpec& p : h.clf->params().specs())
      if (p.name.ends_with("embed_tokens.weight")) name = p.name;
    const TensorView t16 = h.clf->param(name), t32 = r.clf->param(name);
    ASSERT_EQ(t16.dtype, compute) << what;
    ASSERT_EQ(t32.dtype, DType::F32) << what;
    HostTensor rounded(DType::F32, t16.shape);
    convert_copy(rounded.view(), t16);
    EXPECT_NE(to_vector(rounded.view()), to_vector(t32)) << what;  // the rounding is really there
    copy(t32, rounded.view());
    r.clf->frozen_weights_changed();
    EXPECT_EQ(step(h), step(r)) << what;
    EXPECT_EQ(to_vector(h.clf->logits()), to_vector(r.clf->logits())) << what;
    EXPECT_EQ(to_vector(h.clf->trainable_grads()), to_vector(r.clf->trainable_grads())) << what;

    auto parameters = [&](bool embeddings_16bit) {
      ClassifierOptions o = h.clf->options();
      o.embeddings_16bit = embeddings_16bit;
      ArenaPlan plan;
      SequenceClassifier(spec(c), o).add_to_plan(plan);
      for (const MemoryCategory& m : MemoryPlan::from(plan, Device::cpu()).categories)
        if (m.name == "parameters") return double(m.bytes);
      return 0.0;
    };
    EXPECT_NEAR(parameters(false) - parameters(true), 2.0 * t16.numel(), 512) << what;
  }
}

// fp32 full fine-tuning: the same losses and gradients bit for bit, and the planner's activations
// (the run's own arena plan) drop with checkpointing.
TEST_P(DecoderPrecision, CheckpointingIsBitIdenticalAndPlanned) {
  const GoldenCase c = GoldenCase::load(GetParam());
  Model plain = build(c, DType::F32, GradientCheckpointing::Off);
  Model ckpt = build(c, DType::F32, GradientCheckpointing::On);
  EXPECT_EQ(step(plain), step(ckpt));
  EXPECT_EQ(to_vector(plain.clf->trainable_grads()), to_vector(ckpt.clf->trainable_grads()));
  EXPECT_LT(ckpt.act_bytes, plain.act_bytes);

  for (PeftMethod method : {PeftMethod::None, PeftMethod::Lora}) {
    PlanTarget t;
    t.model = spec(c);
    if (method != PeftMethod::None) t.adapters = adapters(method);
    t.max_seq = 64;
    t.precision = DType::BF16;
    auto activations = [&](GradientCheckpointing g) {
      size_t bytes = 0;
      for (const MemoryCategory& m : plan_memory(t, 8, g).categories)
        if (m.name == "activations" || m.name == "attention") bytes += m.bytes;
      return bytes;
    };
    const size_t off = activations(GradientCheckpointing::Off),
                 on = activations(GradientCheckpointing::On);
    // The layers' probabilities are counted as attention (by their name, "act/dec0/probs").
    size_t attention = 0;
    for (const MemoryCategory& m : plan_memory(t, 8, GradientCheckpointing::Off).categories)
      if (m.name == "attention") attention = m.bytes;
    EXPECT_GT(attention, 0u);
    EXPECT_LT(on, off);
    // Two or three layers: checkpointing keeps one layer's slots plus the layer outputs.
    EXPECT_GT(on, off / 3);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, DecoderPrecision, ::testing::Values("llama_pair", "qwen3_pair"));
// Gemma 1, 2 and 3: (1 + w) norms, embeddings x sqrt(hidden) rounded to the 16-bit type, GeGLU,
// sandwich norms, soft-capping (Gemma 2), q / k norms and two RoPE bases (Gemma 3), 3 layers with
// sliding windows shorter than the rows.
INSTANTIATE_TEST_SUITE_P(Gemma, DecoderPrecision,
                         ::testing::Values("gemma_pair", "gemma2_pair", "gemma3_pair"));

}  // namespace
}  // namespace ftune::test
