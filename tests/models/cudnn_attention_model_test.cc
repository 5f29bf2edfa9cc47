// The classifier with cuDNN's flash attention on its small per-layer buffer (ClassifierOptions::
// attention cudnn, bf16 on a GPU; ops/attention_cudnn.h): everywhere, the plan keeps only cuDNN's
// state per layer where it applies and nothing changes elsewhere. On a GPU with cuDNN attention
// compiled in: a tiny encoder's forward and backward (logits, loss, every gradient) follow ftune's
// kernel within the bf16 tolerance with dropout 0, and gradient checkpointing (the forward
// recomputed into the same small buffer) gives the gradients of the run without it, dropout on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "core/gpu_paths.h"
#include "cuda/cuda_libraries.h"
#include "models/bert/encoder_config.h"
#include "models/sequence_classifier.h"
#include "ops/attention_cudnn.h"
#include "test_util.h"

namespace ftune::test {
namespace {

// hidden 128 = 2 heads of 64 (a head size cuDNN's flash attention takes), 2 layers.
EncoderConfig tiny_config(float dropout) {
  EncoderConfig c;
  c.variant = BertVariant::Bert;
  c.vocab_size = 100;
  c.hidden_size = 128;
  c.num_layers = 2;
  c.num_heads = 2;
  c.intermediate_size = 256;
  c.max_position_embeddings = 64;
  c.type_vocab_size = 2;
  c.pad_token_id = 0;
  c.hidden_dropout = c.attention_dropout = c.classifier_dropout = dropout;
  c.set_num_labels(3);
  return c;
}

ClassifierOptions options(Device device, AttentionKernel attention, GradientCheckpointing ckpt) {
  ClassifierOptions o;
  o.max_batch = 3;
  o.max_seq = 40;
  o.training = true;
  o.checkpointing = ckpt;
  o.compute = DType::BF16;
  o.device = device;
  o.attention = attention;
  return o;
}

TEST(CudnnAttentionModel, PlansCudnnsStateOnlyForAGpuIn16Bits) {
  const EncoderConfig c = tiny_config(0.0f);
  auto probs_bytes = [&](Device device, DType compute, AttentionKernel attention) {
    ClassifierOptions o = options(device, attention, GradientCheckpointing::Off);
    o.compute = compute;
    ArenaPlan plan;
    SequenceClassifier(c, o).add_to_plan(plan);
    return plan.buffer("act/layer1/probs").bytes;
  };
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  EXPECT_EQ(probs_bytes(gpu, DType::BF16, AttentionKernel::Cudnn),
            size_t(cudnn_attention_state_floats(3, 2, 40)) * sizeof(float));
  const size_t full = size_t(3 * 2 * 40 * 40) * sizeof(float);
  EXPECT_EQ(probs_bytes(gpu, DType::BF16, AttentionKernel::Ftune), full);
  EXPECT_EQ(probs_bytes(gpu, DType::F32, AttentionKernel::Cudnn), full);
  EXPECT_EQ(probs_bytes(cpu, DType::BF16, AttentionKernel::Cudnn), full);
}

struct Result {
  std::vector<float> logits, grads;
  float loss = 0;
};

// One forward, loss and backward of a fixed right-padded batch on cuda:0 from fixed weights.
Result run(float dropout, AttentionKernel attention, GradientCheckpointing ckpt) {
  const Device gpu = Device::cuda(0);
  const EncoderConfig config = tiny_config(dropout);
  SequenceClassifier model(config, options(gpu, attention, ckpt));
  ArenaPlan plan;
  model.add_to_plan(plan);
  Arena arena(gpu, std::move(plan));
  model.bind(arena);
  // The small buffer cannot hold ftune's probabilities: had cuDNN refused, the call would throw.
  if (attention == AttentionKernel::Cudnn)
    EXPECT_LT(arena.plan().buffer("act/layer0/probs").bytes,
              size_t(3 * 2 * 40 * 40) * sizeof(float));
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  HostTensor w(DType::F32, model.param_values().shape);
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = u(rng);
  for (const ParamSpec& s : model.params().specs())
    if (s.name.find("LayerNorm.weight") != std::string::npos)
      for (int64_t i = 0; i < s.shape.numel(); ++i) w.data<float>()[s.offset + i] += 1.0f;
  copy(model.param_values(), w.view());
  model.frozen_weights_changed();

  Batch b;
  b.size = 3;
  b.seq_len = 40;
  const std::vector<int64_t> lens = {40, 23, 5};
  for (int64_t r = 0; r < b.size; ++r)
    for (int64_t t = 0; t < b.seq_len; ++t) {
      const bool real = t < lens[r];
      b.input_ids.push_back(real ? static_cast<int32_t>(1 + (r * 31 + t * 7) % 99) : 0);
      b.token_type_ids.push_back(real && t > lens[r] / 2 ? 1 : 0);
      b.attention_mask.push_back(real ? 1 : 0);
    }
  b.labels = {0, 2, 1};
  model.set_batch(b);
  model.zero_grad();
  const DropoutPlan d{true, 1234, 5};
  Result out;
  out.logits = to_vector(model.forward(d));
  out.loss = to_vector(model.loss({}))[0];
  model.backward(d);
  out.grads = to_vector(model.trainable_grads());
  return out;
}

// max |a - b| / max |b|
double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, ref = 1e-12;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    ref = std::max(ref, std::fabs(double(b[i])));
  }
  return diff / ref;
}

class CudnnAttentionModelGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    if (!cuda::cudnn_sdpa_compiled())
      FTUNE_SKIP_OR_REQUIRE_CUDNN("cuDNN attention not compiled: " +
                                  cuda::cudnn_sdpa_build_note());
    const std::string why = cudnn_attention_probe(Device::cuda(0), 3, 40, 2, 64, DType::BF16, 0.1f);
    if (!why.empty()) FTUNE_SKIP_OR_REQUIRE_CUDNN("cuDNN refuses the shape: " + why);
  }
};

TEST_F(CudnnAttentionModelGpu, ForwardAndBackwardFollowFtunesKernelOnTheSmallBuffer) {
  const Result ftune = run(0.0f, AttentionKernel::Ftune, GradientCheckpointing::Off);
  const GpuPathCounts before = gpu_path_counts();
  const Result cudnn = run(0.0f, AttentionKernel::Cudnn, GradientCheckpointing::Off);
  const Result cudnn_ckpt = run(0.0f, AttentionKernel::Cudnn, GradientCheckpointing::On);
  // The path, not only the values: every attention pass of the cuDNN runs went through cuDNN.
  const GpuPathCounts paths = gpu_path_counts() - before;
  EXPECT_GT(paths[GpuPath::AttentionCudnn], 0);
  EXPECT_EQ(paths[GpuPath::AttentionFtune], 0);
  EXPECT_EQ(paths[GpuPath::AttentionCudnnRefused], 0);
  ASSERT_EQ(ftune.grads.size(), cudnn.grads.size());
  for (const Result* r : {&cudnn, &cudnn_ckpt}) {
    for (float v : r->grads) ASSERT_TRUE(std::isfinite(v));
    EXPECT_NEAR(r->loss, ftune.loss, 2e-2 * std::fabs(ftune.loss));
    EXPECT_LE(rel(r->logits, ftune.logits), 2e-2);
    EXPECT_LE(rel(r->grads, ftune.grads), 5e-2);
  }
}

TEST_F(CudnnAttentionModelGpu, CheckpointingRecomputesIntoTheSmallBufferWithTheSameMasks) {
  // Dropout on: the recomputed forward must draw cuDNN's masks again (same seed and offset), or
  // the gradients would be those of other masks.
  const Result plain = run(0.1f, AttentionKernel::Cudnn, GradientCheckpointing::Off);
  const Result ckpt = run(0.1f, AttentionKernel::Cudnn, GradientCheckpointing::On);
  EXPECT_EQ(plain.logits, ckpt.logits);
  EXPECT_EQ(plain.loss, ckpt.loss);
  EXPECT_LE(rel(ckpt.grads, plain.grads), 1e-3);
  const Result other = run(0.1f, AttentionKernel::Ftune, GradientCheckpointing::Off);
  EXPECT_GT(rel(other.grads, plain.grads), 1e-3) << "dropout masks should differ from ftune's";
}

}  // namespace
}  // namespace ftune::test
