// Every family keeps the gradient-ready convention of models/gradient_ready.h: its backward calls
// layer_gradients_final(l) once per layer, from the top layer down, and at that call the gradients
// of layer l and of every layer above it are already final. Data-parallel runs start reducing a
// layer's gradient buckets at that call (dist/gradient_reducer.h), so a family that never calls
// it loses the overlap silently, and one that calls it early reduces unfinished gradients.
// Checked on a real backward of a tiny model of each family, full fine-tuning and LoRA, with and
// without gradient checkpointing (which recomputes layers inside the backward loop).
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "../models/adapter_init.h"
#include "core/arena.h"
#include "dist/gradient_reducer.h"
#include "models/backbone.h"
#include "models/gradient_ready.h"
#include "models/param_init.h"
#include "models/sequence_classifier.h"
#include "test_util.h"

namespace ftune::test {
namespace {

nlohmann::json family_config(const std::string& family) {
  nlohmann::json c = {{"vocab_size", 64},        {"hidden_size", 32},
                      {"num_hidden_layers", 3},  {"num_attention_heads", 4},
                      {"intermediate_size", 48}, {"max_position_embeddings", 64},
                      {"pad_token_id", 0},       {"num_labels", 2}};
  if (family == "bert" || family == "roberta") {
    c["model_type"] = family;
    c["type_vocab_size"] = family == "bert" ? 2 : 1;
    c["pad_token_id"] = family == "bert" ? 0 : 1;
  } else if (family == "deberta-v2") {
    c["model_type"] = family;
    c.update({{"type_vocab_size", 0},
              {"relative_attention", true},
              {"position_buckets", 8},
              {"max_relative_positions", -1},
              {"pos_att_type", "p2c|c2p"},
              {"share_att_key", true},
              {"norm_rel_ebd", "layer_norm"},
              {"position_biased_input", false}});
  } else if (family == "modernbert") {
    c["model_type"] = family;
    c.update({{"global_attn_every_n_layers", 2},
              {"local_attention", 4},
              {"classifier_pooling", "mean"}});
  } else if (family == "llama") {
    c["model_type"] = family;
    c.update({{"architectures", {"LlamaForSequenceClassification"}},
              {"num_key_value_heads", 2},
              {"rms_norm_eps", 1e-6},
              {"hidden_act", "silu"},
              {"rope_theta", 10000.0},
              {"bos_token_id", 5},
              {"eos_token_id", 6}});
  } else {
    ADD_FAILURE() << "no tiny config for " << family;
  }
  return c;
}

// Records each call and the trainable gradients at that moment.
struct GradientSnapshots : GradientReadyListener {
  const SequenceClassifier* clf = nullptr;
  std::vector<int64_t> layers;
  std::vector<std::vector<float>> grads;
  void layer_done(int64_t layer) override {
    layers.push_back(layer);
    grads.push_back(to_vector(clf->trainable_grads()));
  }
};

using Case = std::tuple<std::string, PeftMethod, GradientCheckpointing>;

class GradientReadyFamilies : public ::testing::TestWithParam<Case> {};

TEST_P(GradientReadyFamilies, EachLayerOnceTopDownWithItsGradientsFinal) {
  const auto& [family, method, checkpointing] = GetParam();
  const nlohmann::json config = family_config(family);
  const int64_t layers = config["num_hidden_layers"].get<int64_t>();
  ClassifierOptions o;
  o.max_batch = 2;
  o.max_seq = 8;
  o.checkpointing = checkpointing;
  o.adapters.method = method;
  o.adapters.r = 2;
  o.adapters.alpha = 4;
  o.adapters.target_modules = {"all-linear"};
  SequenceClassifier clf(model_spec_from_json(config, "tiny-" + family), o);
  ArenaPlan plan;
  clf.add_to_plan(plan);
  Arena arena(Device::cpu(), std::move(plan));
  clf.bind(arena);
  init_all_params_like_hf(clf, 3);
  if (method != PeftMethod::None) {
    clf.init_adapters(5);
    randomize_lora_b(clf);
  }
  Batch b;
  b.size = 2;
  b.seq_len = 8;
  b.input_ids = {5, 11, 12, 13, 14, 6, 0, 0, 5, 21, 22, 6, 0, 0, 0, 0};
  if (family == "roberta")
    for (int32_t& id : b.input_ids) id = id == 0 ? 1 : id;  // RoBERTa pads with 1
  b.attention_mask = {1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0};
  b.labels = {1, 0};
  clf.set_batch(b);

  GradientSnapshots rec;
  rec.clf = &clf;
  clf.zero_grad();
  const DropoutPlan d{true, 9, 0};
  clf.forward(d);
  clf.loss({});
  set_gradient_listener(&rec);
  clf.backward(d);
  set_gradient_listener(nullptr);

  std::vector<int64_t> expected;
  for (int64_t l = layers - 1; l >= 0; --l) expected.push_back(l);
  ASSERT_EQ(rec.layers, expected) << family << ": layer_gradients_final calls";

  const std::vector<float> final_grads = to_vector(clf.trainable_grads());
  for (size_t call = 0; call < rec.layers.size(); ++call) {
    const int64_t l = rec.layers[call];
    bool layer_has_gradient = false;
    for (const ParamSpec& s : clf.trainable_params().specs()) {
      const int64_t at = param_layer(s.name);
      if (at < l) continue;  // below the layer (or not in one): may still change
      for (int64_t i = s.offset; i < s.offset + s.shape.numel(); ++i) {
        ASSERT_EQ(rec.grads[call][size_t(i)], final_grads[size_t(i)])
            << family << ": " << s.name << " changed after layer_gradients_final(" << l << ")";
        if (at == l && final_grads[size_t(i)] != 0) layer_has_gradient = true;
      }
    }
    EXPECT_TRUE(layer_has_gradient) << family << ": layer " << l << " has no gradient";
  }
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = std::get<0>(info.param);
  for (char& ch : name)
    if (ch == '-') ch = '_';
  name += std::get<1>(info.param) == PeftMethod::None ? "_full" : "_lora";
  if (std::get<2>(info.param) == GradientCheckpointing::On) name += "_checkpointing";
  return name;
}

INSTANTIATE_TEST_SUITE_P(
    AllFamilies, GradientReadyFamilies,
    ::testing::Combine(::testing::Values("bert", "roberta", "deberta-v2", "modernbert", "llama"),
                       ::testing::Values(PeftMethod::None, PeftMethod::Lora),
                       ::testing::Values(GradientCheckpointing::Off, GradientCheckpointing::On)),
    case_name);

}  // namespace
}  // namespace ftune::test
