// Causal-LM fine-tuning against transformers + PEFT (issue 40) on the golden fixtures of
// tools/make_causal_lm_fixtures.py: tiny random LlamaForCausalLM / Qwen2ForCausalLM (untied
// lm_head) and Gemma2ForCausalLM (tied, attention and final logit soft-capping) on a right-padded
// prompt -> completion batch with the prompt masked (TRL's completion-only loss). Checked: the
// checkpoint reads as a causal LM (head, tying, soft-cap); the logits (formed here from ftune's
// hidden states and head, as the fused loss never forms them) at every real position; the fused
// chunked loss equal to transformers' loss and to the plain cross-entropy over the materialised
// logits; every gradient of full fine-tuning (the head's, tied into the embedding's, included);
// packed rows giving the same loss and gradients as padded ones (no attention or loss across
// rows); PEFT's CAUSAL_LM adapter: its trainable set (lm_head frozen), gradients, parameters after
// three AdamW steps; ftune's saved adapter reloading bit for bit with task_type CAUSAL_LM. With
// FTUNE_CAUSAL_LM_OUT=DIR each case writes its trained adapter, logits and merged model for
// `make_causal_lm_fixtures.py --check DIR` (PEFT and AutoModelForCausalLM give the same logits).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <set>

#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/causal_lm_scoring.h"
#include "models/hf_checkpoint.h"
#include "models/peft_adapter.h"
#include "ops/cross_entropy.h"
#include "ops/primitives_cpu.h"
#include "optim/adamw.h"
#include "golden_fixture.h"

namespace ftune::test {
namespace causal_lm_parity {

constexpr double kTol = 1e-4;

struct LmCase {
  std::string dir;
  nlohmann::json meta;
  Batch batch;  // padded, with token_labels
  io::SafetensorsFile expected;
  HostTensor tensor(const std::string& name) const { return expected.read(name, DType::F32); }
  std::string model_dir() const { return dir + "/model"; }
};

std::vector<int32_t> ints(const io::SafetensorsFile& f, const std::string& name) {
  const HostTensor t = f.read(name, DType::I64);
  std::vector<int32_t> out(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = static_cast<int32_t>(t.data<int64_t>()[i]);
  return out;
}

LmCase load_case(const std::string& name) {
  const std::string dir = fixtures_dir() + "/causal_lm/" + name;
  LmCase c{dir, io::read_json_file(dir + "/case.json"), Batch{},
           io::SafetensorsFile::open(dir + "/expected.safetensors")};
  const io::SafetensorsFile in = io::SafetensorsFile::open(dir + "/inputs.safetensors");
  c.batch.size = in.at("input_ids").shape[0];
  c.batch.seq_len = in.at("input_ids").shape[1];
  c.batch.input_ids = ints(in, "input_ids");
  c.batch.attention_mask = ints(in, "attention_mask");
  c.batch.token_labels = ints(in, "token_labels");
  return c;
}

struct LmRun {
  std::unique_ptr<SequenceClassifier> model;
  std::unique_ptr<AdamW> adamw;
  Arena arena;
};

LmRun build(const LmCase& c, bool lora, bool packed = false, DType compute = DType::F32) {
  LmRun r;
  ClassifierOptions o;
  o.compute = compute;
  o.max_batch = c.batch.size;
  o.max_seq = c.batch.seq_len;
  o.packed = packed;
  o.max_tokens = c.batch.size * c.batch.seq_len;
  if (lora) o.adapters = read_peft_adapter_config(c.dir + "/adapter");
  LoadOptions lo;
  lo.causal_lm = true;
  r.model = std::make_unique<SequenceClassifier>(load_model_spec(c.model_dir(), lo), o);
  AdamWOptions adam = fixture_adamw(c.meta["optimizer"]);
  r.adamw = std::make_unique<AdamW>(r.model->trainable_params(), adam);
  ArenaPlan plan;
  r.model->add_to_plan(plan);
  r.adamw->add_to_plan(plan);
  r.arena = Arena(Device::cpu(), std::move(plan));
  r.model->bind(r.arena);
  r.adamw->bind(r.arena);
  const LoadReport report = load_model_weights(*r.model, c.model_dir(), lo);
  EXPECT_TRUE(report.initialised.empty());
  if (lora) load_peft_adapter(*r.model, c.dir + "/adapter");
  r.model->set_batch(c.batch);
  return r;
}

// The logits (N, V) of the last forward: hidden lm_head^T, soft-capped as the model caps them.
std::vector<float> logits_of(const SequenceClassifier& m, TensorView hidden) {
  const ModelInfo& info = m.config();
  const std::vector<float> h = to_vector(hidden), W = to_vector(m.param(info.lm_head));
  const int64_t C = info.hidden_size, V = info.vocab_size, N = static_cast<int64_t>(h.size()) / C;
  std::vector<float> z(N * V);
  cpu::gemm(false, true, N, V, C, 1.0f, h.data(), C, W.data(), C, 0.0f, z.data(), V);
  if (info.lm_softcap > 0)
    for (float& v : z) v = info.lm_softcap * std::tanh(v / info.lm_softcap);
  return z;
}

// max |got - want| / max |want| over the real (unpadded) positions of the padded batch.
double real_positions_error(const std::vector<float>& got, const std::vector<float>& want,
                            const Batch& b, int64_t V) {
  double diff = 0, scale = 1e-6;
  for (int64_t i = 0; i < b.size * b.seq_len; ++i) {
    if (!b.attention_mask[i]) continue;
    for (int64_t v = 0; v < V; ++v) {
      diff = std::max(diff, std::fabs(double(got[i * V + v]) - want[i * V + v]));
      scale = std::max(scale, std::fabs(double(want[i * V + v])));
    }
  }
  return diff / scale;
}

class CausalLmParity : public ::testing::TestWithParam<std::string> {};

TEST_P(CausalLmParity, ReadsTheCheckpointAsACausalLm) {
  const LmCase c = load_case(GetParam());
  LoadOptions lo;
  lo.causal_lm = true;
  const ModelSpec spec = load_model_spec(c.model_dir(), lo);
  const ModelInfo& info = spec.info();
  EXPECT_TRUE(info.causal_lm);
  EXPECT_EQ(info.architecture, c.meta["architecture"].get<std::string>());
  EXPECT_EQ(info.num_labels(), 0);
  const bool tied = c.meta["tie_word_embeddings"].get<bool>();
  EXPECT_EQ(info.lm_head, tied ? "model.embed_tokens.weight" : "lm_head.weight");
  const auto& cap = c.meta["final_logit_softcapping"];
  EXPECT_FLOAT_EQ(info.lm_softcap, cap.is_null() ? 0.0f : cap.get<float>());
  // Saved as HF's *ForCausalLM with no classification fields.
  const nlohmann::json j = spec.to_json();
  EXPECT_EQ(j["architectures"][0], c.meta["architecture"]);
  EXPECT_FALSE(j.contains("id2label"));
  // The parameters are exactly transformers' (a tied head is no parameter of its own).
  std::vector<std::string> names, want = c.meta["full_params"].get<std::vector<std::string>>();
  ParamTable t;
  spec.backbone().add_params(t);
  for (const ParamSpec& s : t.specs()) names.push_back(s.name);
  std::sort(names.begin(), names.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(names, want);
}

TEST_P(CausalLmParity, FullFineTuningLogitsLossAndGradients) {
  const LmCase c = load_case(GetParam());
  LmRun r = build(c, false);
  const TensorView hidden = r.model->forward(DropoutPlan{true});
  const int64_t V = r.model->config().vocab_size;
  const std::vector<float> logits = logits_of(*r.model, hidden);
  const double e_logits =
      real_positions_error(logits, to_vector(c.tensor("logits").view()), c.batch, V);
  EXPECT_LT(e_logits, kTol);
  const float loss = to_vector(r.model->loss({}))[0];
  const float want = to_vector(c.tensor("loss").view())[0];
  EXPECT_NEAR(loss, want, kTol * std::fabs(want));
  // The fused loss is the plain one: ftune's cross-entropy over the materialised logits.
  const int64_t N = c.batch.size * c.batch.seq_len;
  std::vector<float> probs(N * V);
  float plain = 0;
  cpu::cross_entropy_forward(&plain, probs.data(), logits.data(), c.batch.token_labels.data(),
                             nullptr, 0.0f, N, V);
  EXPECT_NEAR(loss, plain, 1e-6 * std::fabs(plain));
  EXPECT_NEAR(plain, to_vector(c.tensor("plain_loss").view())[0], kTol * std::fabs(want));
  int64_t counted = 0;
  for (int32_t y : c.batch.token_labels) counted += y >= 0;
  EXPECT_EQ(r.model->lm_counted_tokens(), counted);

  r.model->backward(DropoutPlan{true});
  double worst = 0;
  for (const ParamSpec& s : r.model->trainable_params().specs()) {
    const double e = max_rel_error(r.model->grad(s.name), c.tensor("grad." + s.name).view());
    EXPECT_LT(e, kTol) << s.name;
    worst = std::max(worst, e);
  }
  std::printf("%s: logits %.2e, loss %.6f (HF %.6f), worst of %zu gradients %.2e\n",
              GetParam().c_str(), e_logits, loss, want, r.model->trainable_params().specs().size(),
              worst);
}

// Packed rows (no padding; positions restart per row; attention and loss stay inside each row):
// the same loss and gradients as the padded batch.
TEST_P(CausalLmParity, PackedRowsMatchPaddedOnes) {
  const LmCase c = load_case(GetParam());
  LmRun padded = build(c, false), packed = build(c, false, true);
  float losses[2];
  int i = 0;
  for (LmRun* r : {&padded, &packed}) {
    r->model->forward(DropoutPlan{true});
    losses[i++] = to_vector(r->model->loss({}))[0];
    r->model->backward(DropoutPlan{true});
  }
  EXPECT_NEAR(losses[1], losses[0], 1e-6 * std::fabs(losses[0]));
  EXPECT_LT(max_rel_error(packed.model->trainable_grads(), padded.model->trainable_grads()), 1e-5);
}

TEST_P(CausalLmParity, LoraGradientsAndThreeAdamWSteps) {
  const LmCase c = load_case(GetParam());
  LmRun r = build(c, true);
  const auto& lora = c.meta["lora"];
  std::vector<std::string> names, want = lora["trainable"].get<std::vector<std::string>>();
  for (const ParamSpec& s : r.model->trainable_params().specs()) names.push_back(s.name);
  std::sort(names.begin(), names.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(names, want);  // the adapters only: PEFT's CAUSAL_LM keeps lm_head frozen
  std::set<std::string> no_decay;
  for (const auto& n : lora["no_decay"]) no_decay.insert(n.get<std::string>());
  for (const ParamSpec& s : r.model->trainable_params().specs())
    EXPECT_EQ(s.decay, !no_decay.count(s.name)) << s.name;

  const auto losses = to_vector(c.tensor("lora.losses").view());
  const float lr = c.meta["optimizer"]["lr"].get<float>();
  for (int step = 0; step < c.meta["steps"].get<int>(); ++step) {
    r.model->zero_grad();
    const TensorView hidden = r.model->forward(DropoutPlan{true});
    if (step == 0) {
      EXPECT_LT(real_positions_error(logits_of(*r.model, hidden),
                                     to_vector(c.tensor("lora.logits").view()), c.batch,
                                     r.model->config().vocab_size),
                kTol);
    }
    const float loss = to_vector(r.model->loss({}))[0];
    EXPECT_NEAR(loss, losses[step], kTol * std::fabs(losses[step])) << "step " << step;
    r.model->backward(DropoutPlan{true});
    if (step == 0)
      for (const ParamSpec& s : r.model->trainable_params().specs())
        EXPECT_LT(max_rel_error(r.model->grad(s.name), c.tensor("lora.grad." + s.name).view()), kTol)
            << s.name;
    r.adamw->step(r.model->trainable_values(), r.model->trainable_grads(), lr);
  }
  double worst = 0;
  for (const ParamSpec& s : r.model->trainable_params().specs()) {
    const AdamComparison cmp =
        compare_after_adam(r.model->param(s.name), c.tensor("lora.step3." + s.name).view(),
                           c.tensor("lora.grad." + s.name).view(), 3 * lr, s.name);
    EXPECT_LT(cmp.rel_error, kTol) << s.name;
    worst = std::max(worst, cmp.rel_error);
  }
  std::printf("%s: LoRA losses %.5f %.5f %.5f, worst parameter after 3 AdamW steps %.2e\n",
              GetParam().c_str(), losses[0], losses[1], losses[2], worst);

  // Saved in PEFT's format as a CAUSAL_LM adapter, reloaded bit for bit.
  TempDir tmp;
  save_peft_adapter(*r.model, tmp.path() + "/adapter");
  const nlohmann::json saved = io::read_json_file(tmp.path() + "/adapter/adapter_config.json");
  EXPECT_EQ(saved["task_type"], "CAUSAL_LM");
  EXPECT_TRUE(saved["modules_to_save"].is_null());
  LmCase again = load_case(GetParam());
  again.dir = tmp.path();
  std::filesystem::create_symlink(c.model_dir(), tmp.path() + "/model");
  std::filesystem::copy_file(c.dir + "/case.json", tmp.path() + "/case.json");
  LmRun r2 = build(again, true);
  for (const ParamSpec& s : r.model->trainable_params().specs())
    EXPECT_EQ(to_vector(r.model->param(s.name)), to_vector(r2.model->param(s.name))) << s.name;

  if (const char* out = std::getenv("FTUNE_CAUSAL_LM_OUT")) {
    const std::string dir = std::string(out) + "/" + GetParam();
    save_peft_adapter(*r.model, dir + "/adapter");
    const std::vector<float> z = logits_of(*r.model, r.model->forward(DropoutPlan{}));
    const int64_t B = c.batch.size, T = c.batch.seq_len, V = r.model->config().vocab_size;
    io::write_safetensors(dir + "/ftune_logits.safetensors",
                          {{"logits", tensor_from(z, Shape{B, T, V}).view(), {}}});
    merge_adapters(*r.model);
    save_model(*r.model, dir + "/merged");
  }
}

// LoRA in bf16 (the frozen base stored in 16 bits, the CPU's emulation of a GPU run): the frozen
// head is stored in bf16 too, tied (the embedding table) or untied (a buffer of its own instead of
// an fp32 copy), and the loss and the adapters' gradients follow PEFT's fp32 ones within bf16's
// tolerance (tests/models/decoder_precision_test.cc).
TEST_P(CausalLmParity, LoraInBf16KeepsTheFrozenHeadIn16Bits) {
  const LmCase c = load_case(GetParam());
  LmRun r = build(c, true, false, DType::BF16);
  const ModelInfo& info = r.model->config();
  const bool tied = c.meta["tie_word_embeddings"].get<bool>();
  EXPECT_EQ(r.model->param(info.lm_head).dtype, DType::BF16);
  EXPECT_TRUE(r.model->param_is_16bit(info.lm_head));
  int64_t tables = 0;  // bf16 buffers of V x C: the embedding table, and an untied head
  for (const TensorView& w : r.model->weight_storage())
    tables += w.dtype == DType::BF16 && w.numel() == info.vocab_size * info.hidden_size;
  EXPECT_EQ(tables, tied ? 1 : 2);
  r.model->forward(DropoutPlan{true});
  const float loss = to_vector(r.model->loss({}))[0];
  const float want = to_vector(c.tensor("lora.losses").view())[0];
  EXPECT_NEAR(loss, want, 2e-2 * std::fabs(want));
  r.model->backward(DropoutPlan{true});
  for (const ParamSpec& s : r.model->trainable_params().specs())
    EXPECT_LT(max_rel_error(r.model->grad(s.name), c.tensor("lora.grad." + s.name).view()), 8e-2)
        << s.name;
}

// Full fine-tuning in bf16 (autocast: the trained fp32 head's blocks cast to bf16 for the loss's
// GEMMs, its gradient accumulated in fp32): the loss and every gradient, the head's included, follow
// transformers' fp32 ones within bf16's tolerance.
TEST_P(CausalLmParity, FullFineTuningInBf16FollowsFp32) {
  const LmCase c = load_case(GetParam());
  LmRun r = build(c, false, false, DType::BF16);
  r.model->forward(DropoutPlan{true});
  const float loss = to_vector(r.model->loss({}))[0];
  const float want = to_vector(c.tensor("loss").view())[0];
  EXPECT_NEAR(loss, want, 2e-2 * std::fabs(want));
  r.model->backward(DropoutPlan{true});
  for (const ParamSpec& s : r.model->trainable_params().specs())
    EXPECT_LT(max_rel_error(r.model->grad(s.name), c.tensor("grad." + s.name).view()), 8e-2)
        << s.name;
}

// Validation loss per token over several batches is the token-weighted mean (transformers' loss of
// the whole batch), perplexity its exp.
TEST_P(CausalLmParity, EvaluationLossAndPerplexityPerToken) {
  const LmCase c = load_case(GetParam());
  LmRun r = build(c, false);
  const LmEval e = evaluate_causal_lm(*r.model, {slice_rows(c.batch, 0, 1), slice_rows(c.batch, 1, 3)});
  const double want = to_vector(c.tensor("loss").view())[0];
  EXPECT_NEAR(e.loss, want, kTol * want);
  EXPECT_NEAR(e.perplexity, std::exp(want), kTol * std::exp(want));
  int64_t counted = 0;
  for (int32_t y : c.batch.token_labels) counted += y >= 0;
  EXPECT_EQ(e.tokens, counted);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CausalLmParity,
                         ::testing::Values("llama_clm", "qwen2_clm", "gemma2_clm"));

// A toy word-level tokenizer whose ids (BOS 1, words 3..7) fit the fixtures' vocabulary.
text::Tokenizer words() {
  return text::Tokenizer::from_json(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 1, "content": "<s>", "special": true, "single_word": false,
                      "lstrip": false, "rstrip": false, "normalized": false}],
    "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                  {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": null,
    "model": {"type": "WordLevel", "unk_token": "<s>",
              "vocab": {"<s>": 1, "a": 3, "b": 4, "c": 5, "d": 6, "e": 7}}
  })");
}

// Candidate scoring: log p(candidate | prompt) summed over the candidate's tokens, equal to the
// log-softmax of the materialised logits at the positions that predict them.
TEST(CausalLmScoring, CandidateLogLikelihoodsSumTheCompletionTokens) {
  const LmCase c = load_case("gemma2_clm");
  LmRun r = build(c, false);
  const text::Tokenizer tok = words();
  const std::vector<double> got = completion_log_likelihoods(*r.model, tok, "a b", {" c", " d e"});
  ASSERT_EQ(got.size(), 2u);
  // <s> a b c and <s> a b d e: position 2 predicts c / d, position 3 predicts e.
  Batch b;
  b.size = 1;
  b.seq_len = 5;
  b.input_ids = {1, 3, 4, 6, 7};
  b.attention_mask = {1, 1, 1, 1, 1};
  r.model->set_batch(b);
  const std::vector<float> z = logits_of(*r.model, r.model->forward(DropoutPlan{}));
  const int64_t V = r.model->config().vocab_size;
  auto log_p = [&](int64_t t, int64_t y) {
    double mx = -1e30, sum = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(z[t * V + v]));
    for (int64_t v = 0; v < V; ++v) sum += std::exp(z[t * V + v] - mx);
    return z[t * V + y] - mx - std::log(sum);
  };
  EXPECT_NEAR(got[0], log_p(2, 5), 1e-4);
  EXPECT_NEAR(got[1], log_p(2, 6) + log_p(3, 7), 1e-4);
  EXPECT_LT(got[1], 0);
}

// all-linear on a causal LM adapts every layer's linear modules and leaves lm_head out (PEFT's
// rule); naming lm_head is refused with the reason.
TEST(CausalLmAdapters, AllLinearLeavesTheLmHeadOut) {
  LoadOptions lo;
  lo.causal_lm = true;
  const ModelSpec spec = load_model_spec(load_case("llama_clm").model_dir(), lo);
  AdapterConfig a;
  a.method = PeftMethod::Lora;
  a.r = 4;
  a.alpha = 8;
  a.target_modules = {"all-linear"};
  const std::vector<std::string> adapted = resolve_target_modules(a, spec.backbone().modules(), "peft");
  EXPECT_EQ(adapted.size(), 14u);  // 2 layers x q, k, v, o, gate, up, down
  for (const std::string& m : adapted) EXPECT_EQ(m.find("lm_head"), std::string::npos);
  a.target_modules = {"q_proj", "lm_head"};
  try {
    resolve_target_modules(a, spec.backbone().modules(), "peft");
    FAIL() << "lm_head adapted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("output projection"), std::string::npos) << e.what();
  }
}

// A classifier's adapter (task_type SEQ_CLS) is refused on a causal LM, naming the file.
TEST(CausalLmAdapters, AClassifiersAdapterIsRefused) {
  const LmCase c = load_case("llama_clm");
  TempDir tmp;
  std::filesystem::copy(c.dir + "/adapter", tmp.path() + "/adapter");
  nlohmann::json j = io::read_json_file(tmp.path() + "/adapter/adapter_config.json");
  j["task_type"] = "SEQ_CLS";
  io::write_json_atomic(tmp.path() + "/adapter/adapter_config.json", j);
  LmRun r = build(c, true);
  try {
    load_peft_adapter(*r.model, tmp.path() + "/adapter");
    FAIL() << "a SEQ_CLS adapter loaded on a causal LM";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("adapter_config.json: task_type SEQ_CLS"), std::string::npos)
        << e.what();
  }
}

// Bad input: an untied checkpoint without lm_head.weight names the file and the key.
TEST(CausalLmLoading, AnUntiedCheckpointWithoutItsHeadIsRefused) {
  const LmCase c = load_case("llama_clm");
  TempDir tmp;
  const std::string dir = tmp.path() + "/model";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(c.model_dir() + "/config.json", dir + "/config.json");
  const io::SafetensorsFile f = io::SafetensorsFile::open(c.model_dir() + "/model.safetensors");
  std::vector<HostTensor> keep;
  std::vector<io::SafetensorsTensor> tensors;
  for (const io::SafetensorsEntry& e : f.entries()) {
    if (e.name == "lm_head.weight") continue;
    keep.push_back(f.read(e.name, DType::F32));
  }
  size_t k = 0;
  for (const io::SafetensorsEntry& e : f.entries())
    if (e.name != "lm_head.weight") tensors.push_back({e.name, keep[k++].view(), {}});
  io::write_safetensors(dir + "/model.safetensors", tensors);
  LoadOptions lo;
  lo.causal_lm = true;
  ClassifierOptions o;
  o.max_batch = 1;
  o.max_seq = 4;
  SequenceClassifier m(load_model_spec(dir, lo), o);
  ArenaPlan plan;
  m.add_to_plan(plan);
  Arena arena(Device::cpu(), std::move(plan));
  m.bind(arena);
  try {
    load_model_weights(m, dir, lo);
    FAIL() << "loaded without lm_head.weight";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("lm_head.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tie_word_embeddings"), std::string::npos) << e.what();
  }
}

}  // namespace causal_lm_parity
}  // namespace ftune::test
