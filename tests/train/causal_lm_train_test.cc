// `ftune train` with model.task causal_lm (issue 40) end to end on a tiny random Llama
// (LlamaForCausalLM, untied lm_head, GQA) with the MiniLM tokenizer: a synthetic prompt ->
// completion task whose training loss falls, validation lines with loss and perplexity, the model
// (full fine-tuning) or the adapter (LoRA, task_type CAUSAL_LM) saved at the end; gradient
// accumulation 2 x 2 gives batch 4's first step (the micro-batches weighed by their counted
// tokens); bad input (a classification-only key, a row without a completion) exits 2 naming the
// key or file:line (padded micro-batches give the packed ones' step); `ftune predict --candidates`
// scores completions with the published model; `ftune eval` on the published model reports the
// run's last validation loss on the same file (JSONL or TSV with named columns, any batch size)
// and refuses bad rows and classifier options, exit 2; `ftune hpo run` searches the recipe on the
// validation loss, minimised, and prunes a trial that does not learn. On a GPU (the kit's tests
// stage; skipped elsewhere) the same runs follow the CPU's: the fused loss's CUDA twin inside whole
// training steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "core/device.h"
#include "hpo_export.h"
#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

using json = nlohmann::json;

json tiny_causal_llama_config() {
  return {{"model_type", "llama"},         {"architectures", {"LlamaForCausalLM"}},
          {"vocab_size", 30522},           {"hidden_size", 32},
          {"num_hidden_layers", 2},        {"num_attention_heads", 4},
          {"num_key_value_heads", 2},      {"intermediate_size", 64},
          {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-6},
          {"hidden_act", "silu"},          {"rope_theta", 10000.0},
          {"initializer_range", 0.2},      {"tie_word_embeddings", false},
          {"pad_token_id", 0},             {"bos_token_id", 101},
          {"eos_token_id", 102}};
}

// "please repeat 2: w1 w2" -> "w1 w2 w1 w2", words from a small set: the completion is
// predictable from the prompt, and rows of one length (neighbours in a length-sorted step batch)
// learn different numbers of completion tokens.
void write_repeat_task(const std::string& path, int n, uint64_t seed) {
  static const char* words[] = {"red", "green", "blue", "cat", "dog", "house", "tree", "water"};
  std::mt19937_64 rng(seed);
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) {
    std::string w;
    const int k = 1 + static_cast<int>(rng() % 3);
    for (int j = 0; j < k; ++j) w += std::string(j ? " " : "") + words[rng() % 8];
    std::string filler, completion;
    for (int j = static_cast<int>(rng() % 5); j > 0; --j) filler += "please ";
    const int times = 1 + static_cast<int>(rng() % 3);
    for (int j = 0; j < times; ++j) completion += " " + w;
    out << json{{"prompt", filler + "repeat " + std::to_string(times) + ": " + w},
                {"completion", completion}}
               .dump()
        << "\n";
  }
}

class CausalLmTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.path() + "/llama";
    write_random_causal_lm(tiny_causal_llama_config(), model_, 3);
    write_repeat_task(tmp_.path() + "/train.jsonl", 32, 1);
    write_repeat_task(tmp_.path() + "/val.jsonl", 12, 2);
  }
  // A run's YAML: `training` lines go under training:, `extra` after it (other sections).
  std::string config(const std::string& run, const std::string& training,
                     const std::string& extra = "") {
    const std::string path = tmp_.path() + "/" + run + ".yaml";
    std::ofstream(path) << "model:\n  path: " << model_ << "\n  task: causal_lm\n"
                        << "data:\n  train: " << tmp_.path() << "/train.jsonl\n  validation: "
                        << tmp_.path() << "/val.jsonl\n  max_length: 32\n"
                        << "training:\n  threads: 2\n  log_every: 1\n  learning_rate: 3.0e-3\n"
                        << "  warmup_steps: 0\n  memory_budget: 1GiB\n"
                        << training << extra << "output:\n  dir: " << tmp_.path() << "/" << run
                        << "\n  progress: plain\n";
    return path;
  }
  std::vector<json> lines(const std::string& run, const std::string& split) {
    std::vector<json> out;
    std::ifstream in(tmp_.path() + "/" + run + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line);
      if (j["split"] == split) out.push_back(j);
    }
    return out;
  }
  TempDir tmp_;
  std::string model_;
};

TEST_F(CausalLmTrain, FullFineTuningLearnsTheCompletionsAndSavesACausalLm) {
  const CliResult r = run_ftune(
      "train --config " +
      config("full", "  epochs: 4\n  batch_size: 8\n  gradient_accumulation: 1\n"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<json> train = lines("full", "train");
  ASSERT_EQ(train.size(), 16u);
  double first = 0, last = 0;
  for (int i = 0; i < 4; ++i)
    first += train[i]["loss"].get<double>(), last += train[12 + i]["loss"].get<double>();
  // ln(30522) = 10.3 per token at the start; a fall of 1.5 per step on average.
  EXPECT_LT(last, first - 6.0) << r.output;
  const std::vector<json> val = lines("full", "validation");
  ASSERT_EQ(val.size(), 4u);
  for (const json& v : val) {
    EXPECT_NEAR(v["perplexity"].get<double>(), std::exp(v["loss"].get<double>()),
                1e-9 * v["perplexity"].get<double>());
    EXPECT_GT(v["tokens"].get<int64_t>(), 12);
  }
  EXPECT_LT(val.back()["loss"].get<double>(), val.front()["loss"].get<double>());
  std::ifstream summary_file(tmp_.path() + "/full/summary.json");
  const json summary = json::parse(summary_file);
  EXPECT_EQ(summary["eval_metric"], "loss") << summary.dump();
  std::ifstream cfg(tmp_.path() + "/full/model/config.json");
  const json saved = json::parse(cfg);
  EXPECT_EQ(saved["architectures"][0], "LlamaForCausalLM") << saved.dump();
  EXPECT_FALSE(saved.contains("id2label")) << saved.dump();

  // ftune predict --candidates on the published model and on the untrained one: the trained
  // model finds the right completion far more likely.
  const std::string rows = tmp_.path() + "/rows.jsonl";
  std::ofstream(rows) << json{{"prompt", "repeat 2: red"}}.dump() << "\n"
                      << json{{"prompt", "please repeat 1: cat dog"}}.dump() << "\n";
  const auto scored = [&](const std::string& model, const std::string& out) {
    const CliResult p = run_ftune("predict --model " + model + " --data " + rows + " --output " +
                                  out + " --candidates ' red red, water water'");
    EXPECT_EQ(p.exit_code, 0) << p.output;
    std::vector<json> got;
    std::ifstream in(out);
    for (std::string line; std::getline(in, line);) got.push_back(json::parse(line));
    return got;
  };
  const std::vector<json> tuned = scored(tmp_.path() + "/full/model", tmp_.path() + "/tuned.jsonl");
  const std::vector<json> base = scored(model_, tmp_.path() + "/base.jsonl");
  ASSERT_EQ(tuned.size(), 2u);
  ASSERT_EQ(base.size(), 2u);
  for (const json& t : tuned) {
    ASSERT_EQ(t["log_likelihoods"].size(), 2u) << t.dump();
    const double p0 = t["probabilities"][0], p1 = t["probabilities"][1];
    EXPECT_NEAR(p0 + p1, 1.0, 1e-12);
    EXPECT_EQ(t["prediction"], p0 > p1 ? " red red" : " water water") << t.dump();
  }
  EXPECT_EQ(tuned[0]["prediction"], " red red") << tuned[0].dump();
  EXPECT_GT(tuned[0]["log_likelihoods"][0].get<double>(),
            base[0]["log_likelihoods"][0].get<double>() + 2.0)
      << tuned[0].dump() << base[0].dump();

  std::ofstream(rows) << json{{"text", "no prompt"}}.dump() << "\n";
  const CliResult bad = run_ftune("predict --model " + model_ + " --data " + rows +
                                  " --output " + tmp_.path() + "/bad.jsonl --candidates a,b");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("rows.jsonl:1"), std::string::npos) << bad.output;
}

TEST_F(CausalLmTrain, PlanAndBenchTakeTheTask) {
  const std::string yaml = config("plan", "  max_steps: 2\n  batch_size: 4\n");
  const CliResult plan = run_ftune("plan --json --config " + yaml, "", Streams::kStdout);
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find("LlamaForCausalLM"), std::string::npos) << plan.output;
  const CliResult bench = run_ftune("bench --steps 2 --warmup 1 --repeats 1 --config " + yaml);
  EXPECT_EQ(bench.exit_code, 0) << bench.output;
}

TEST_F(CausalLmTrain, LoraSavesACausalLmAdapter) {
  const CliResult r = run_ftune(
      "train --config " +
      config("lora", "  max_steps: 6\n  batch_size: 4\n  gradient_accumulation: 2\n",
             "peft:\n  method: lora\n  r: 4\n  alpha: 8\n  target_modules: all-linear\n"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(tmp_.path() + "/lora/adapter/adapter_config.json");
  const json adapter = json::parse(in);
  EXPECT_EQ(adapter["task_type"], "CAUSAL_LM") << adapter.dump();
  const std::vector<json> train = lines("lora", "train");
  ASSERT_EQ(train.size(), 6u);
  EXPECT_LT(train.back()["loss"].get<double>(), train.front()["loss"].get<double>());
}

TEST_F(CausalLmTrain, AccumulationTwoByTwoIsBatchFour) {
  const std::string steps = "  max_steps: 1\n  epochs: 1\n  seed: 2\n";
  const CliResult a =
      run_ftune("train --config " +
                config("acc", steps + "  batch_size: 2\n  gradient_accumulation: 2\n"));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const CliResult b =
      run_ftune("train --config " +
                config("one", steps + "  batch_size: 4\n  gradient_accumulation: 1\n"));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  // Padded micro-batches (the staging's per-token labels in rows x length) as packed ones.
  const CliResult c =
      run_ftune("train --config " +
                config("pad", steps + "  batch_size: 2\n  gradient_accumulation: 2\n") +
                " data.packing=off");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("micro-batches padded"), std::string::npos) << c.output;
  const json x = lines("acc", "train").at(0), y = lines("one", "train").at(0),
             z = lines("pad", "train").at(0);
  for (const char* key : {"loss", "grad_norm"}) {
    EXPECT_NEAR(x[key].get<double>(), y[key].get<double>(), 1e-5 * y[key].get<double>()) << key;
    EXPECT_NEAR(z[key].get<double>(), y[key].get<double>(), 1e-5 * y[key].get<double>()) << key;
  }
  // The validation after the step: the same weights.
  EXPECT_NEAR(lines("acc", "validation").at(0)["loss"].get<double>(),
              lines("one", "validation").at(0)["loss"].get<double>(), 1e-5);
}

// Full fine-tuning in fp32 (the head trains: dW) and LoRA in bf16 (the frozen head stored in
// bf16), on the GPU against the CPU in fp32: every step's loss and the validation loss after
// them (fp32 within 1e-4; bf16 within 3e-2).
TEST_F(CausalLmTrain, GpuRunsFollowTheCpuRuns) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const std::string steps = "  max_steps: 4\n  epochs: 1\n  seed: 2\n  batch_size: 4\n";
  const std::string lora =
      "peft:\n  method: lora\n  r: 4\n  alpha: 8\n  dropout: 0\n  target_modules: all-linear\n";
  const auto train = [&](const std::string& run, const std::string& extra,
                         const std::string& overrides) {
    const CliResult r = run_ftune("train --config " + config(run, steps, extra) + overrides);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::vector<double> out;
    for (const json& j : lines(run, "train")) out.push_back(j["loss"].get<double>());
    const std::vector<json> val = lines(run, "validation");
    if (!val.empty()) out.push_back(val.back()["loss"].get<double>());
    return out;
  };
  const std::string cpu = " training.device=cpu training.precision=fp32";
  const std::string gpu = " training.device=cuda";
  for (const auto& [name, extra, precision, tol] :
       {std::tuple<std::string, std::string, std::string, double>{"full", "", "fp32", 1e-4},
        {"lora", lora, "bf16", 3e-2}}) {
    SCOPED_TRACE(name);
    const std::vector<double> want = train(name + "_cpu", extra, cpu);
    const std::vector<double> got = train(name + "_gpu", extra, gpu + " training.precision=" + precision);
    ASSERT_EQ(want.size(), 5u);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * want[i]) << i;
  }
}

TEST_F(CausalLmTrain, BadInputExitsTwoNamingTheKeyOrTheLine) {
  const CliResult key =
      run_ftune("train --config " + config("key", "  max_steps: 1\n  loss: cross_entropy\n"));
  EXPECT_EQ(key.exit_code, 2) << key.output;
  EXPECT_NE(key.output.find("training.loss"), std::string::npos) << key.output;
  EXPECT_NE(key.output.find("causal_lm"), std::string::npos) << key.output;

  const CliResult metric = run_ftune("train --config " + config("metric", "  max_steps: 1\n") +
                                     " eval.metric=accuracy");
  EXPECT_EQ(metric.exit_code, 2) << metric.output;
  EXPECT_NE(metric.output.find("eval.metric"), std::string::npos) << metric.output;

  {
    std::ofstream(tmp_.path() + "/train.jsonl", std::ios::app)
        << json{{"prompt", "repeat: cat"}}.dump() << "\n";
  }
  const CliResult row = run_ftune("train --config " + config("row", "  max_steps: 1\n"));
  EXPECT_EQ(row.exit_code, 2) << row.output;
  EXPECT_NE(row.output.find("train.jsonl:33"), std::string::npos) << row.output;
  EXPECT_NE(row.output.find("'completion'"), std::string::npos) << row.output;
}

// A study over the causal-LM recipe: its metric is the validation loss per token, minimised
// without study.direction; each trial's value is its best (lowest) validation loss; a trial whose
// learning rate cannot move the weights is pruned at an evaluation against the good one's median.
TEST_F(CausalLmTrain, HpoSearchesTheRecipeOnTheValidationLoss) {
  const std::string train = config("trials", "  epochs: 4\n  batch_size: 8\n");
  {
    // The run's YAML as the study's train config, trials under trials/trial-N.
    std::ifstream in(train);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(tmp_.path() + "/train.yaml") << text;
  }
  const std::string search = tmp_.path() + "/search.yaml";
  std::ofstream(search) << "study: {name: clm, metric: eval.loss}\n"
                        << "storage: sqlite:///" << tmp_.path() << "/study.db\n"
                        << "sampler: {type: grid}\n"
                        << "space:\n  training.learning_rate: {type: categorical, choices: "
                           "[\"3.0e-3\", \"1.0e-9\"]}\n"
                        << "pruner: {type: median, n_startup_trials: 1, n_warmup_steps: 0}\n"
                        << "objective: {train_config: train.yaml}\n";
  const CliResult r = run_ftune("hpo run --config " + search + " --trials 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json trials = exported_trials(search, tmp_.path());
  ASSERT_EQ(trials.size(), 2u) << trials.dump();
  EXPECT_EQ(trials[0]["state"], "COMPLETE") << trials[0].dump();
  EXPECT_EQ(trials[1]["state"], "PRUNED") << trials[1].dump();
  // The finished trial's value: its lowest validation loss.
  const std::vector<json> val = lines("trials/trial-0", "validation");
  ASSERT_EQ(val.size(), 4u);
  double best = val[0]["loss"];
  for (const json& v : val) best = std::min(best, v["loss"].get<double>());
  EXPECT_NEAR(trials[0]["value"].get<double>(), best, 1e-9 * best) << trials[0].dump();
  EXPECT_LT(best, val[0]["loss"].get<double>());
  const CliResult status = run_ftune("hpo status --config " + search);
  EXPECT_NE(status.output.find("minimize"), std::string::npos) << status.output;
}

TEST_F(CausalLmTrain, EvalReportsTheRunsValidationLoss) {
  // Full fine-tuning, 4 steps of 8 (packed micro-batches), one validation at the end of the epoch.
  const CliResult r = run_ftune(
      "train --config " +
      config("evalrun", "  epochs: 1\n  batch_size: 8\n  gradient_accumulation: 1\n"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<json> val = lines("evalrun", "validation");
  ASSERT_EQ(val.size(), 1u) << r.output;
  const double run_loss = val.back()["loss"].get<double>();
  const int64_t run_tokens = val.back()["tokens"].get<int64_t>();
  const std::string tuned = tmp_.path() + "/evalrun/model";
  const auto eval = [&](const std::string& model, const std::string& args) {
    const CliResult e = run_ftune("eval --model " + model + " --max-length 32 --threads 2 " + args,
                                  "", Streams::kStdout);
    EXPECT_EQ(e.exit_code, 0) << e.output;
    return e.exit_code == 0 ? json::parse(e.output) : json::object();
  };
  // Padded batches of 8 and of 1 row, against the run's packed evaluation.
  for (const std::string batch : {"8", "1"}) {
    const json j = eval(tuned, "--data " + tmp_.path() + "/val.jsonl --batch-size " + batch +
                                   " --output " + tmp_.path() + "/eval" + batch + ".json");
    EXPECT_NEAR(j.value("loss", 0.0), run_loss, 1e-5 * run_loss) << j.dump();
    EXPECT_EQ(j.value("tokens", int64_t(0)), run_tokens) << j.dump();
    EXPECT_NEAR(j.value("perplexity", 0.0), std::exp(j.value("loss", 0.0)),
                1e-9 * j.value("perplexity", 0.0));
    EXPECT_EQ(j["data"].value("rows", int64_t(0)), 12) << j.dump();
    std::ifstream written(tmp_.path() + "/eval" + batch + ".json");
    EXPECT_EQ(json::parse(written)["loss"], j["loss"]);
  }
  // The untrained model on the same rows: the loss the run brought down.
  const json base = eval(model_, "--data " + tmp_.path() + "/val.jsonl");
  EXPECT_GT(base.value("loss", 0.0), run_loss + 1.0) << base.dump();
  EXPECT_EQ(base.value("tokens", int64_t(0)), run_tokens) << base.dump();

  // The same rows as TSV with other column names.
  {
    std::ifstream in(tmp_.path() + "/val.jsonl");
    std::ofstream tsv(tmp_.path() + "/val.tsv");
    tsv << "question\tanswer\n";
    for (std::string line; std::getline(in, line);) {
      const json row = json::parse(line);
      tsv << row["prompt"].get<std::string>() << "\t" << row["completion"].get<std::string>()
          << "\n";
    }
  }
  const json tsv = eval(tuned, "--data " + tmp_.path() +
                                   "/val.tsv --prompt-field question --completion-field answer");
  EXPECT_NEAR(tsv.value("loss", 0.0), run_loss, 1e-5 * run_loss) << tsv.dump();

  // Bad input, exit 2: a row without its completion (file:line, key), a missing column, an
  // option of classifiers.
  const std::string bad = tmp_.path() + "/bad.jsonl";
  std::ofstream(bad) << json{{"prompt", "repeat 1: cat"}, {"completion", " cat"}}.dump() << "\n"
                     << json{{"prompt", "repeat 1: dog"}}.dump() << "\n";
  const CliResult row = run_ftune("eval --model " + tuned + " --data " + bad);
  EXPECT_EQ(row.exit_code, 2) << row.output;
  EXPECT_NE(row.output.find("bad.jsonl:2"), std::string::npos) << row.output;
  EXPECT_NE(row.output.find("'completion'"), std::string::npos) << row.output;
  const CliResult column = run_ftune("eval --model " + tuned + " --data " + tmp_.path() +
                                     "/val.tsv --prompt-field query --completion-field answer");
  EXPECT_EQ(column.exit_code, 2) << column.output;
  EXPECT_NE(column.output.find("query"), std::string::npos) << column.output;
  const CliResult threshold = run_ftune("eval --model " + tuned + " --data " + tmp_.path() +
                                        "/val.jsonl --threshold 0.5");
  EXPECT_EQ(threshold.exit_code, 2) << threshold.output;
  EXPECT_NE(threshold.output.find("--threshold"), std::string::npos) << threshold.output;
}

}  // namespace
}  // namespace ftune::test
