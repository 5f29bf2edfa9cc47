// The key table (train/config_keys.h) is the one source of the training keys: docs/configuration.md
// is exactly what it generates; every key it lists is one the parser reads (none reported as
// unknown), with its rule and type words; a typo gets the closest key; `ftune config` lists the
// keys and prints a resolved configuration, refusing a bad one with the key and exit status 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "core/error.h"
#include "run_cli.h"
#include "test_util.h"
#include "train/config_keys.h"
#include "train/train_config.h"

namespace ftune::test {
namespace {

TEST(ConfigKeys, TheCheckedInDocsPageIsWhatTheTableGenerates) {
  const std::string page = file_bytes(source_dir() + "/docs/configuration.md");
  ASSERT_FALSE(page.empty());
  EXPECT_TRUE(page == config_keys_markdown())
      << "docs/configuration.md differs from the key table: regenerate it with "
         "`ftune config --keys --markdown > docs/configuration.md`";
}

TEST(ConfigKeys, KeysAreUniqueAndEachHasATypeAHelpAndADefaultDisplay) {
  std::set<std::string> seen;
  const TrainConfig defaults;
  for (const ConfigKey& k : config_keys()) {
    EXPECT_TRUE(seen.insert(k.key).second) << k.key << " twice";
    EXPECT_FALSE(k.type.empty()) << k.key;
    EXPECT_FALSE(k.help.empty()) << k.key;
    ASSERT_TRUE(k.show) << k.key;
    (void)k.show(defaults);
  }
  EXPECT_GT(seen.size(), 80u);
}

// Each key of the table, set in a config, is read by the parser: the error (if its default
// display is not a value, e.g. "from the data") is never "unknown key".
TEST(ConfigKeys, EveryKeyOfTheTableIsOneTheParserReads) {
  const TrainConfig defaults;
  for (const ConfigKey& k : config_keys()) {
    if (!k.read) continue;  // peft.*: its section reader (models/adapter_config.h)
    YAML::Node root = YAML::Load("{model: {path: m}, data: {train: t.jsonl}}");
    std::string value = k.show(defaults);
    if (value.empty()) value = "x";
    apply_overrides(root, {k.key + "=" + value});
    try {
      TrainConfig::parse(root, "c.yaml");
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).find("unknown key"), std::string::npos)
          << k.key << ": " << e.what();
    }
  }
}

TEST(ConfigKeys, RulesAndTypesComeFromTheRows) {
  const auto error_of = [](const std::string& override_text) {
    YAML::Node root = YAML::Load("{model: {path: m}, data: {train: t.jsonl}}");
    apply_overrides(root, {override_text});
    try {
      TrainConfig::parse(root, "c.yaml");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of("training.warmup_ratio=1"),
            "c.yaml: key 'training.warmup_ratio' must be in [0, 1)");
  EXPECT_EQ(error_of("training.memory_fraction=0"),
            "c.yaml: key 'training.memory_fraction' must be in (0, 1]");
  EXPECT_EQ(error_of("data.max_length=1"), "c.yaml: key 'data.max_length' must be at least 2");
  EXPECT_EQ(error_of("training.tf32=maybe"),
            "c.yaml: key 'training.tf32' must be one of auto, on, off, got 'maybe'");
  EXPECT_EQ(error_of("training.epochs=many"),
            "c.yaml: key 'training.epochs' must be an integer, got 'many'");
  EXPECT_EQ(error_of("data.folds=1"), "c.yaml: key 'data.folds' must be 0 (off) or at least 2");
  EXPECT_EQ(error_of("training.lerning_rate=1"),
            "c.yaml: unknown key 'training.lerning_rate' (did you mean 'training.learning_rate'?)");
  EXPECT_EQ(error_of("training.learning_rate=1e-4"), "");
  EXPECT_EQ(closest_config_key("eval.metrc"), "eval.metric");
  EXPECT_EQ(closest_config_key("completely.different"), "");
}

// A closed-choice key is read once into its enum: every word of its row parses to the value
// whose word it is, the default shows as the enum's word, and a word outside the set is refused
// naming the key, the words and (for a near miss) the closest one.
TEST(ConfigKeys, ChoiceKeysAreParsedOnceIntoTheirEnums) {
  const auto parse = [](const std::string& override_text) {
    YAML::Node root = YAML::Load("{model: {path: m}, data: {train: t.jsonl}}");
    apply_overrides(root, {override_text});
    return TrainConfig::parse(root, "c.yaml");
  };
  EXPECT_EQ(parse("training.tf32=off").training.tf32, Switch::Off);
  EXPECT_EQ(parse("data.packing=on").data.packing, Switch::On);
  EXPECT_EQ(parse("training.precision=bf16").training.precision, PrecisionSetting::BF16);
  EXPECT_EQ(parse("training.attention=cudnn").training.attention, AttentionSetting::Cudnn);
  EXPECT_EQ(parse("training.loss=margin_mse").training.loss, LossSetting::MarginMse);
  EXPECT_EQ(parse("training.schedule=constant").training.schedule, ScheduleKind::Constant);
  EXPECT_EQ(parse("training.plan_lengths=max_length").training.plan_lengths,
            PlanLengths::MaxLength);
  EXPECT_EQ(parse("data.format=flagembedding").data.format, data::DataFormat::kFlagEmbedding);
  EXPECT_EQ(parse("data.bad_rows=skip").data.bad_rows, data::BadRowPolicy::kSkip);
  EXPECT_EQ(parse("data.groups_without_positive=fail").data.groups_without_positive,
            GroupsWithoutPositive::Fail);
  EXPECT_EQ(parse("eval.mode=min").eval.mode, MetricMode::Min);
  EXPECT_EQ(parse("eval.threshold_metric=mcc").eval.threshold_metric, ThresholdMetric::Mcc);
  EXPECT_EQ(parse("output.progress=plain").output.progress, ProgressStyle::Plain);
  EXPECT_EQ(parse("training.cuda_graphs=off").training.cuda_graphs, Switch::Off);
  EXPECT_EQ(TrainConfig().training.loss, LossSetting::Auto);

  int choice_rows = 0;
  const TrainConfig defaults;
  for (const ConfigKey& k : config_keys()) {
    if (!k.read || k.type.find(" or ") == std::string::npos || k.key == "data.pair_template")
      continue;
    // "a, b or c": each word round-trips through the parser and shows as itself.
    std::vector<std::string> words;
    std::string type = k.type;
    for (std::string sep : {", ", " or "})
      for (size_t at; (at = type.find(sep)) != std::string::npos;)
        type.replace(at, sep.size(), "|");
    for (size_t start = 0;;) {
      const size_t bar = type.find('|', start);
      words.push_back(type.substr(start, bar - start));
      if (bar == std::string::npos) break;
      start = bar + 1;
    }
    if (std::any_of(words.begin(), words.end(),
                    [](const std::string& w) { return w.find(' ') != std::string::npos; }))
      continue;  // not a list of words (e.g. "integer >= 1, or auto")
    ++choice_rows;
    for (const std::string& w : words) {
      TrainConfig c;
      k.read(c, YAML::Node(w), "k");
      EXPECT_EQ(k.show(c), w) << k.key;
    }
    EXPECT_NE(std::find(words.begin(), words.end(), k.show(defaults)), words.end()) << k.key;
  }
  EXPECT_GE(choice_rows, 15);

  const auto error_of = [&](const std::string& override_text) {
    try {
      parse(override_text);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of("training.precision=bf61"),
            "c.yaml: key 'training.precision' must be one of auto, fp32, bf16, fp16, got 'bf61' "
            "(did you mean 'bf16'?)");
  EXPECT_EQ(error_of("output.progress=progressbar"),
            "c.yaml: key 'output.progress' must be one of auto, bar, plain, got 'progressbar'");
}

TEST(ConfigKeys, CausalLmTaskRefusesClassificationKeysAndItsPresetIsTheRecipe) {
  const auto parse = [](const std::string& yaml) {
    return TrainConfig::parse(YAML::Load(yaml), "c.yaml");
  };
  const TrainConfig lm =
      parse("{preset: lora-causal-lm, model: {path: m}, data: {train: t.jsonl}}");
  EXPECT_EQ(lm.model.task, ModelTask::CausalLm);
  EXPECT_EQ(lm.training.learning_rate, 2e-4);
  EXPECT_EQ(lm.training.schedule, ScheduleKind::Cosine);
  EXPECT_EQ(lm.training.warmup_ratio, 0.03);
  EXPECT_EQ(lm.peft.r, 16);
  EXPECT_EQ(lm.peft.alpha, 32);
  for (const char* bad : {"data: {train: t.jsonl, text_field: q}",
                          "data: {train: t.jsonl}, training: {loss: bce}",
                          "data: {train: t.jsonl}, eval: {metric: accuracy}"}) {
    try {
      parse(std::string("{model: {path: m, task: causal_lm}, ") + bad + "}");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("causal_lm"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse("{model: {path: m}, data: {train: t.jsonl, completion_field: c}}"),
               InputError);
  EXPECT_THROW(parse("{model: {path: m}, data: {train: t.jsonl}, eval: {metric: perplexity}}"),
               InputError);
  EXPECT_EQ(parse("{model: {path: m, task: causal_lm}, data: {train: t.jsonl, prompt_field: q}, "
                  "eval: {metric: perplexity}}")
                .data.prompt_field,
            "q");
}

TEST(ConfigCommand, ListsEveryKeyAndResolvesOrRefusesAConfig) {
  const CliResult keys = run_ftune("config --keys", "", Streams::kStdout);
  ASSERT_EQ(keys.exit_code, 0) << keys.output;
  for (const ConfigKey& k : config_keys())
    EXPECT_NE(keys.output.find(k.key + "  ("), std::string::npos) << k.key;

  TempDir tmp;
  const std::string yaml = tmp.path() + "/c.yaml";
  std::ofstream(yaml) << "preset: minilm\nmodel: {path: m}\ndata: {train: t.jsonl}\n";
  const CliResult resolved =
      run_ftune("config --config " + yaml + " training.learning_rate=2e-5", "", Streams::kStdout);
  ASSERT_EQ(resolved.exit_code, 0) << resolved.output;
  const YAML::Node r = YAML::Load(resolved.output);
  EXPECT_EQ(r["training"]["learning_rate"].as<double>(), 2e-5);        // the override
  EXPECT_EQ(r["training"]["effective_batch_size"].as<int64_t>(), 32);  // the preset's
  EXPECT_EQ(r["data"]["max_length"].as<int64_t>(), 128);               // the preset's

  const CliResult bad = run_ftune("config --config " + yaml + " training.shedule=linear");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("command-line override 'training.shedule=linear': unknown key "
                            "'training.shedule' (did you mean 'training.schedule'?)"),
            std::string::npos)
      << bad.output;
  EXPECT_EQ(run_ftune("config").exit_code, 2);
  EXPECT_EQ(run_ftune("config --markdown --config " + yaml).exit_code, 2);
}

}  // namespace
}  // namespace ftune::test
