// What the mixed-precision model tests share: two accumulated training micro-steps with different
// dropout masks, the relative difference of two value lists, and a golden case's classifier
// planned and bound for a precision / checkpointing / adapter variant, with its gradients compared
// tensor by tensor.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "adapter_init.h"
#include "core/memory.h"
#include "golden_fixture.h"
#include "models/hf_checkpoint.h"
#include "models/sequence_classifier.h"

namespace ftune::test {

// Two accumulated micro-steps (dropout keys 77 / micro 0 and 1, loss scale 0.5); their losses.
inline std::vector<float> two_micro_steps(SequenceClassifier& clf) {
  std::vector<float> losses;
  for (uint32_t micro = 0; micro < 2; ++micro) {
    const DropoutPlan d{true, 77, micro};
    clf.forward(d);
    losses.push_back(to_vector(clf.loss({}))[0]);
    clf.backward(d, 0.5f);
  }
  return losses;
}

// max |a - b| / max |b|.
inline double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, ref = 1e-12;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    ref = std::max(ref, std::fabs(double(b[i])));
  }
  return diff / ref;
}

// A classifier of a golden case's model, planned for and set to its batch, training; act_bytes:
// its planned activations and their gradients.
struct PrecisionModel {
  std::unique_ptr<SequenceClassifier> clf;
  Arena arena;
  size_t act_bytes = 0;
};

// With adapters: PEFT's initialisation (seed 5), then random B matrices (every adapter gradient
// non-trivial).
inline PrecisionModel build_precision_model(const GoldenCase& c, const ModelSpec& spec,
                                            DType compute, GradientCheckpointing ckpt,
                                            const AdapterConfig& adapters = {},
                                            bool embeddings_16bit = true) {
  ClassifierOptions o;
  o.embeddings_16bit = embeddings_16bit;
  o.max_batch = c.batch.size;
  o.max_seq = c.batch.seq_len;
  o.training = true;
  o.checkpointing = ckpt;
  o.compute = compute;
  o.adapters = adapters;
  PrecisionModel r;
  r.clf = std::make_unique<SequenceClassifier>(spec, o);
  ArenaPlan plan;
  r.clf->add_to_plan(plan);
  for (const auto& [group, bytes] : plan.bytes_by_group())
    if (group == "act" || group == "gradact") r.act_bytes += bytes;
  r.arena = Arena(Device::cpu(), std::move(plan));
  r.clf->bind(r.arena);
  load_model_weights(*r.clf, c.model_dir);
  if (adapters.enabled()) {
    r.clf->init_adapters(5);
    randomize_lora_b(*r.clf);
  }
  r.clf->set_batch(c.batch);
  return r;
}

// Each trainable tensor's gradient of `got` against `want`, relative to the tensor's largest.
// Tensors whose name contains one of `zero_grad` are left out: biases the softmax cancels (a key
// bias adds q_i . b to every score of row i), whose exact gradient is zero and whose computed one
// is rounding noise in either precision.
inline void expect_grads_follow(const PrecisionModel& got, const PrecisionModel& want, double tol,
                                const std::string& what,
                                const std::vector<std::string>& zero_grad = {}) {
  for (const ParamSpec& s : want.clf->trainable_params().specs()) {
    if (std::any_of(zero_grad.begin(), zero_grad.end(),
                    [&](const std::string& z) { return s.name.find(z) != std::string::npos; }))
      continue;
    const std::vector<float> a = to_vector(got.clf->grad(s.name)),
                             b = to_vector(want.clf->grad(s.name));
    ASSERT_EQ(a.size(), b.size()) << s.name;
    EXPECT_LE(rel(a, b), tol) << what << " " << s.name;
  }
}

}  // namespace ftune::test
