// DeBERTa-v2/v3 and ModernBERT under mixed precision (their golden fixtures: shared and separate
// position projections, log buckets narrower than the rows, padded rows; ModernBERT's local window
// shorter than the rows, cls and mean pooling), with hidden and attention dropout on (the relative
// embeddings' dropout too): bf16 and f16 logits and losses follow the fp32 model within the
// DESIGN's bf16 tolerance (2e-2), every parameter gradient within 8e-2 (bf16) / 1e-2 (f16) of its
// tensor's largest, as the BERT and decoder mixed-precision tests hold them; gradient
// checkpointing gives bit-identical losses and gradients in 16 bits; 16-bit activations plan less
// memory than fp32 and checkpointing less again. LoRA (the frozen base stored only in 16 bits) and
// DoRA (fp32 master, 16-bit shadow) on every linear module (DeBERTa's position projections and
// pooler included), adapter dropout on, likewise. f16 with activations whose disentangled-attention
// products pass f16's range (where HF's eager fp16 DeBERTa gives NaN) stays finite.
#include <gtest/gtest.h>

#include <cmath>

#include "precision_compare.h"

namespace ftune::test {
namespace {

struct Family {
  const char* name;
  std::vector<std::string> targets;  // every linear module of the family (PEFT suffixes)
  // Biases whose exact gradient is zero (the softmax cancels them): DeBERTa's key_proj and
  // pos_key_proj biases add q_i . b to every score of query i's row.
  std::vector<std::string> zero_grad;
};

const Family kFamilies[] = {
    {"deberta_v3_pair", {"query_proj", "key_proj", "value_proj", "dense"}, {"key_proj.bias"}},
    {"deberta_v2_pair",
     {"query_proj", "key_proj", "value_proj", "dense", "pos_key_proj", "pos_query_proj"},
     {"key_proj.bias"}},
    {"modernbert_mean", {"Wqkv", "Wo", "Wi", "dense"}, {}},
    {"modernbert_cls", {"Wqkv", "Wo", "Wi", "dense"}, {}},
};

ModelSpec spec(const GoldenCase& c) {
  DropoutRates rates;
  rates.hidden = 0.1f;
  rates.attention = 0.1f;
  return load_model_spec(c.model_dir).with_dropout(rates);
}

AdapterConfig adapters(const Family& f, PeftMethod method) {
  AdapterConfig a;
  a.method = method;
  a.r = 4;
  a.alpha = 8;
  a.dropout = 0.1f;
  a.target_modules = f.targets;
  return a;
}

const char* name_of(DType t) { return t == DType::BF16 ? "bf16" : "f16"; }

class EncoderPrecision : public ::testing::TestWithParam<Family> {};

TEST_P(EncoderPrecision, FollowsFp32AndCheckpointingIsBitIdentical) {
  const GoldenCase c = GoldenCase::load(GetParam().name);
  const ModelSpec s = spec(c);
  PrecisionModel f32 = build_precision_model(c, s, DType::F32, GradientCheckpointing::Off);
  const std::vector<float> l32 = two_micro_steps(*f32.clf);
  for (DType compute : {DType::BF16, DType::F16}) {
    const std::string what = name_of(compute);
    PrecisionModel h = build_precision_model(c, s, compute, GradientCheckpointing::Off);
    PrecisionModel hc = build_precision_model(c, s, compute, GradientCheckpointing::On);
    const std::vector<float> l16 = two_micro_steps(*h.clf), l16c = two_micro_steps(*hc.clf);
    for (size_t i = 0; i < l32.size(); ++i) {
      EXPECT_NEAR(l16[i], l32[i], 2e-2 * std::fabs(l32[i])) << what;
      EXPECT_NE(l16[i], l32[i]) << what;  // the 16-bit path really ran
    }
    EXPECT_LE(rel(to_vector(h.clf->logits()), to_vector(f32.clf->logits())), 2e-2) << what;
    // Rounding, not a wrong term: f16's 11 significant bits hold it 8x closer than bf16's 8.
    expect_grads_follow(h, f32, compute == DType::BF16 ? 8e-2 : 1e-2, what, GetParam().zero_grad);
    EXPECT_EQ(l16, l16c) << what;
    EXPECT_EQ(to_vector(h.clf->trainable_grads()), to_vector(hc.clf->trainable_grads())) << what;
    EXPECT_LT(h.act_bytes, f32.act_bytes) << what;
    EXPECT_LT(hc.act_bytes, h.act_bytes) << what;
  }
}

// LoRA keeps the frozen base only in 16 bits; DoRA keeps the fp32 master and its 16-bit shadow.
TEST_P(EncoderPrecision, AdaptersFollowFp32AndCheckpointingIsBitIdentical) {
  const GoldenCase c = GoldenCase::load(GetParam().name);
  const ModelSpec s = spec(c);
  for (PeftMethod method : {PeftMethod::Lora, PeftMethod::Dora}) {
    const AdapterConfig a = adapters(GetParam(), method);
    PrecisionModel f32 = build_precision_model(c, s, DType::F32, GradientCheckpointing::Off, a);
    const std::vector<float> l32 = two_micro_steps(*f32.clf);
    const std::vector<float> g32 = to_vector(f32.clf->trainable_grads());
    for (DType compute : {DType::BF16, DType::F16}) {
      const std::string what =
          std::string(method == PeftMethod::Lora ? "lora " : "dora ") + name_of(compute);
      PrecisionModel h = build_precision_model(c, s, compute, GradientCheckpointing::Off, a);
      PrecisionModel hc = build_precision_model(c, s, compute, GradientCheckpointing::On, a);
      EXPECT_EQ(h.clf->frozen_16bit(), method == PeftMethod::Lora) << what;
      const std::vector<float> l16 = two_micro_steps(*h.clf), l16c = two_micro_steps(*hc.clf);
      for (size_t i = 0; i < l32.size(); ++i) {
        EXPECT_NEAR(l16[i], l32[i], 2e-2 * std::fabs(l32[i])) << what;
        EXPECT_NE(l16[i], l32[i]) << what;
      }
      expect_grads_follow(h, f32, 8e-2, what, GetParam().zero_grad);
      const std::vector<float> g16 = to_vector(h.clf->trainable_grads());
      EXPECT_NE(g16, g32) << what;
      EXPECT_EQ(l16, l16c) << what;
      EXPECT_EQ(g16, to_vector(hc.clf->trainable_grads())) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, EncoderPrecision, ::testing::ValuesIn(kFamilies),
                         [](const auto& info) { return std::string(info.param.name); });

// Query and key projections scaled 600x: the unscaled c2p / p2c products q . pk of the tiny
// DeBERTa-v3 (heads of 8) pass 65504, which HF's eager fp16 forms in fp16 (inf, then NaN out of the
// softmax; tools/deberta_fp16_overflow.py runs this case through transformers). ftune's f16 model,
// with checkpointing, keeps the scores, the softmax statistics and the probabilities in fp32:
// logits, losses and every gradient stay finite.
TEST(DebertaF16, ProductsPastF16RangeStayFinite) {
  const GoldenCase c = GoldenCase::load("deberta_v3_pair");
  PrecisionModel f16 = build_precision_model(c, spec(c), DType::F16, GradientCheckpointing::On);
  float largest = 0;
  for (int64_t l = 0; l < 2; ++l)
    for (const char* proj : {"query_proj", "key_proj"}) {
      const std::string name =
          "deberta.encoder.layer." + std::to_string(l) + ".attention.self." + proj + ".weight";
      std::vector<float> w = to_vector(f16.clf->param(name));
      for (float& e : w) e *= 600.0f, largest = std::max(largest, std::fabs(e));
      copy(f16.clf->param(name), tensor_from(w, f16.clf->param(name).shape).view());
    }
  f16.clf->frozen_weights_changed();  // the 16-bit shadow follows
  EXPECT_LT(largest, 65504.0f / 8);   // the weights themselves are f16-representable
  const std::vector<float> losses = two_micro_steps(*f16.clf);
  for (float l : losses) EXPECT_TRUE(std::isfinite(l)) << l;
  for (float e : to_vector(f16.clf->logits())) EXPECT_TRUE(std::isfinite(e)) << e;
  for (float e : to_vector(f16.clf->trainable_grads())) ASSERT_TRUE(std::isfinite(e));
}

}  // namespace
}  // namespace ftune::test
