// Commands never write over what they read, and an interrupted export leaves nothing behind:
//  - `export --merge --output` equal to --model or --adapter, in any spelling (a symlink,
//    dir/../dir, a trailing slash), or a directory around the model, is refused with nothing
//    written (it used to merge the adapter into the base in place, again at every run);
//  - `predict`, `eval`, `tokenize` and `report` refuse an --output that is one of their inputs;
//  - an existing --output is replaced by a later export only when ftune exported it, and then
//    whole: a SIGTERM while the new directory is half-written leaves the old one byte for byte
//    and no temporary file or directory.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "run_cli.h"
#include "test_util.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

// Every regular file under `dir` (hidden ones included) with its bytes.
std::map<std::string, std::string> kept_tree(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = file_bytes(e.path());
  return out;
}

// The names in `dir` that start with a dot (temporaries are hidden).
std::vector<std::string> hidden_entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().starts_with(".")) out.push_back(e.path().filename());
  return out;
}

class InputsKept : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = tmp_.path() + "/base";
    adapter_ = tmp_.path() + "/adapter";
    fs::copy(fixtures_dir() + "/engine/bert_pair/model", base_, fs::copy_options::recursive);
    fs::copy(fixtures_dir() + "/peft/bert_lora/adapter", adapter_, fs::copy_options::recursive);
    rows_ = tmp_.path() + "/rows.jsonl";
    std::ofstream(rows_) << "{\"input_ids\": [2, 5, 7, 3], \"label\": \"LABEL_1\"}\n"
                         << "{\"input_ids\": [2, 9, 3], \"label\": \"LABEL_0\"}\n";
  }
  CliResult export_to(const std::string& output, const std::string& env = "") {
    return run_ftune(
        "export --model " + base_ + " --adapter " + adapter_ + " --merge --output " + output, env);
  }
  TempDir tmp_;
  std::string base_, adapter_, rows_;
};

TEST_F(InputsKept, ExportOverItsInputsIsRefusedInAnySpelling) {
  const auto base_before = kept_tree(base_);
  const auto adapter_before = kept_tree(adapter_);
  fs::create_directory_symlink(base_, tmp_.path() + "/link");
  for (const std::string& out :
       {base_, base_ + "/", base_ + "/../base", tmp_.path() + "/link", adapter_,
        tmp_.path() + "/./adapter", tmp_.path() /* contains both */}) {
    const CliResult r = export_to(out);
    EXPECT_EQ(r.exit_code, 2) << out << "\n" << r.output;
    EXPECT_NE(r.output.find("never writes over what it reads"), std::string::npos) << out << "\n"
                                                                                   << r.output;
  }
  EXPECT_EQ(kept_tree(base_), base_before);
  EXPECT_EQ(kept_tree(adapter_), adapter_before);
  EXPECT_TRUE(hidden_entries(tmp_.path()).empty());
}

TEST_F(InputsKept, PredictEvalAndTokenizeRefuseAnOutputThatIsAnInput) {
  const std::string rows_bytes = file_bytes(rows_);
  fs::create_symlink(rows_, tmp_.path() + "/rows-link.jsonl");
  const std::string spellings[] = {
      rows_, tmp_.path() + "/rows-link.jsonl",
      tmp_.path() + "/../" + fs::path(tmp_.path()).filename().string() + "/rows.jsonl"};
  for (const std::string& out : spellings) {
    CliResult r = run_ftune("predict --model " + base_ + " --data " + rows_ + " --output " + out);
    EXPECT_EQ(r.exit_code, 2) << out << "\n" << r.output;
    EXPECT_NE(r.output.find("--output"), std::string::npos) << r.output;
    r = run_ftune("eval --model " + base_ + " --data " + rows_ + " --output " + out);
    EXPECT_EQ(r.exit_code, 2) << out << "\n" << r.output;
    EXPECT_NE(r.output.find("--output"), std::string::npos) << r.output;
    r = run_ftune("tokenize --tokenizer " + fixtures_dir() + "/tokenizers/minilm/tokenizer.json" +
                  " --input " + rows_ + " --output " + out);
    EXPECT_EQ(r.exit_code, 2) << out << "\n" << r.output;
    EXPECT_NE(r.output.find("--output"), std::string::npos) << r.output;
  }
  // `ftune report` over the study's SQLite file or a run's metrics.
  const std::string db = tmp_.path() + "/study.db";
  std::ofstream(db) << "not touched\n";
  CliResult rep = run_ftune("report --storage sqlite:///" + db + " --output " + db);
  EXPECT_EQ(rep.exit_code, 2) << rep.output;
  EXPECT_NE(rep.output.find("never writes over what it reads"), std::string::npos) << rep.output;
  EXPECT_EQ(file_bytes(db), "not touched\n");
  fs::create_directories(tmp_.path() + "/run");
  std::ofstream(tmp_.path() + "/run/metrics.jsonl") << "{}\n";
  rep = run_ftune("report " + tmp_.path() + "/run --output " + tmp_.path() + "/run/metrics.jsonl");
  EXPECT_EQ(rep.exit_code, 2) << rep.output;
  EXPECT_EQ(file_bytes(tmp_.path() + "/run/metrics.jsonl"), "{}\n");
  // A file of the model directory.
  const std::string config_bytes = file_bytes(base_ + "/config.json");
  const CliResult r = run_ftune("predict --model " + base_ + " --data " + rows_ + " --output " +
                                base_ + "/config.json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(file_bytes(base_ + "/config.json"), config_bytes);
  EXPECT_EQ(file_bytes(rows_), rows_bytes);
}

// An existing --output is replaced only when ftune exported it: a directory of the user's is
// refused untouched; a second export replaces the first whole.
TEST_F(InputsKept, ExportReplacesOnlyItsOwnOutput) {
  const std::string mine = tmp_.path() + "/mine";
  fs::create_directories(mine);
  std::ofstream(mine + "/notes.txt") << "mine\n";
  CliResult r = export_to(mine);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("notes.txt"), std::string::npos) << r.output;
  EXPECT_EQ(file_bytes(mine + "/notes.txt"), "mine\n");
  EXPECT_FALSE(fs::exists(mine + "/model.safetensors"));

  const std::string out = tmp_.path() + "/merged";
  ASSERT_EQ(export_to(out).exit_code, 0);
  const auto first = kept_tree(out);
  r = export_to(out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(kept_tree(out), first);  // the same merge, whole, once (not merged twice)
  EXPECT_TRUE(hidden_entries(tmp_.path()).empty());
}

// SIGTERM while the new directory is half-written (the debug hook pauses there): the earlier
// export stays byte for byte and no temporary is left (three SIGTERMs used to leave three
// full-size hidden .model.safetensors.tmp-* files).
TEST_F(InputsKept, InterruptedExportLeavesTheOldOutputAndNoTemporary) {
  const std::string out = tmp_.path() + "/merged";
  ASSERT_EQ(export_to(out).exit_code, 0);
  const auto before = kept_tree(out);
  // Another adapter (a different merge) for the interrupted export: a torn swap would show.
  const std::string other = tmp_.path() + "/rslora";
  fs::copy(fixtures_dir() + "/peft/bert_rslora/adapter", other, fs::copy_options::recursive);
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::string log = tmp_.path() + "/export.log";
    const pid_t pid =
        spawn_ftune("export --model " + base_ + " --adapter " + other + " --merge --output " + out,
                    log, "FTUNE_DEBUG_EXPORT_PAUSE_MS=60000");
    ASSERT_TRUE(wait_for_text(log, "half-written", 60)) << file_bytes(log);
    ::kill(pid, SIGTERM);
    EXPECT_EQ(wait_ftune(pid), 128 + SIGTERM) << file_bytes(log);
    fs::remove(log);
  }
  EXPECT_EQ(kept_tree(out), before);
  EXPECT_TRUE(hidden_entries(tmp_.path()).empty());
  EXPECT_TRUE(hidden_entries(out).size() == 1 && hidden_entries(out)[0] == ".ftune-export");
}

}  // namespace
}  // namespace ftune::test
