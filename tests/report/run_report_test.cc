// `ftune report RUN_DIR`: the run views over a real run directory (tests/fixtures/report/run:
// metrics.jsonl, summary.json and config.yaml of a 36-step MiniLM run on the CPU). Each chart
// must hold one mark per recorded value; views whose numbers a run does not record say so; the
// file is self-contained; bad run directories are errors naming the file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "report/run_view.h"
#include "html_probe.h"
#include "run_cli.h"
#include "test_util.h"

namespace ftune::report {
namespace {

namespace fs = std::filesystem;

std::string run_fixture() { return test::fixtures_dir() + "/report/run"; }

using test_html::count;
using test_html::declared_points;
using test_html::figure;

// Lines of metrics.jsonl with this split that hold a numeric `key`.
int lines_with(const std::string& split, const std::string& key) {
  std::ifstream in(run_fixture() + "/metrics.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    n += j["split"] == split && j.contains(key) && j[key].is_number();
  }
  return n;
}

TEST(RunReport, EveryChartHoldsOnePointPerRecordedValue) {
  const std::string html = render_page(run_page(read_run_dir(run_fixture())));
  const struct {
    const char* id;
    int points;
  } expected[] = {
      {"run-loss", lines_with("train", "loss") + lines_with("validation", "loss")},
      {"run-lr", lines_with("train", "lr")},
      {"run-grad-norm", lines_with("train", "grad_norm")},
      {"run-samples-per-s", lines_with("train", "samples_per_s")},
      {"run-tokens-per-s", lines_with("train", "tokens_per_s")},
      {"run-eval", 6 * lines_with("validation", "accuracy")},  // six scalar metrics
  };
  for (const auto& e : expected) {
    SCOPED_TRACE(e.id);
    const std::string fig = figure(html, e.id);
    ASSERT_FALSE(fig.empty());
    EXPECT_GT(e.points, 0);
    EXPECT_EQ(declared_points(fig), e.points);
    EXPECT_EQ(static_cast<int>(count(fig, "<circle class=\"pt")), e.points);
  }
  EXPECT_EQ(lines_with("train", "loss"), 18);
  // Memory: a planned and a touched bar for each category the run planned bytes for.
  const std::string memory = figure(html, "run-memory-chart");
  const auto summary = nlohmann::json::parse(test::file_bytes(run_fixture() + "/summary.json"));
  int categories = 0;
  for (const auto& [name, bytes] : summary["memory"]["planned"].items()) categories += bytes > 0;
  EXPECT_EQ(categories, 9);
  EXPECT_EQ(declared_points(memory), 2 * categories);
  EXPECT_EQ(static_cast<int>(count(memory, "<rect class=\"bar")), 2 * categories);
  EXPECT_NE(memory.find("optimizer state"), std::string::npos);
  // Whole-run numbers and the resolved config.
  EXPECT_NE(html.find("input-wait fraction (whole run)"), std::string::npos);
  // The fixture's ftune logged no per-interval input wait: no empty chart, a note instead.
  EXPECT_TRUE(figure(html, "run-input-wait").empty());
  EXPECT_NE(html.find("no per-interval input wait (written by an older ftune)"), std::string::npos);
  EXPECT_NE(html.find("effective_batch_size: 8"), std::string::npos);
  // A CPU run has no NVML statistics: said, not left blank.
  EXPECT_NE(html.find("not recorded: GPU statistics: this run did not sample NVML"),
            std::string::npos);
}

TEST(RunReport, GpuStatisticsWhereRecorded) {
  test::TempDir tmp;
  fs::copy(run_fixture(), tmp.path(), fs::copy_options::recursive);
  auto summary = nlohmann::json::parse(test::file_bytes(tmp.path() + "/summary.json"));
  summary["gpu"] = {{"name", "NVIDIA H100 80GB HBM3"}, {"nvml", "available"}, {"samples", 40},
                    {"utilization_percent", {{"mean", 87.5}, {"max", 99}}},
                    {"memory_used_max_bytes", 3221225472.0}, {"memory_total_bytes", 85899345920.0}};
  std::ofstream(tmp.path() + "/summary.json") << summary.dump();
  // Per-interval input wait and GPU utilisation, as a GPU run's train lines carry them.
  std::ifstream in(run_fixture() + "/metrics.jsonl");
  std::string text;
  int train_lines = 0;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["split"] == "train") {
      j["input_wait_fraction"] = 0.01 * (train_lines % 3);
      j["gpu_util_percent"] = 90.0 + train_lines % 5;
      ++train_lines;
    }
    text += j.dump() + "\n";
  }
  std::ofstream(tmp.path() + "/metrics.jsonl") << text;
  const std::string html = render_page(run_page(read_run_dir(tmp.path())));
  for (const char* id : {"run-input-wait", "run-gpu-util"}) {
    SCOPED_TRACE(id);
    const std::string fig = figure(html, id);
    ASSERT_FALSE(fig.empty());
    EXPECT_EQ(declared_points(fig), train_lines);
  }
  EXPECT_NE(figure(html, "run-input-wait").find("input wait 2.00 %"), std::string::npos);
  EXPECT_EQ(html.find("no per-interval input wait"), std::string::npos);
  EXPECT_NE(html.find("NVIDIA H100 80GB HBM3"), std::string::npos);
  EXPECT_NE(html.find("<td>utilisation mean %</td><td>87.5</td>"), std::string::npos);
  EXPECT_NE(html.find("<td>memory used max</td><td>3.0 GiB</td>"), std::string::npos);
}

// A run in progress: no summary yet, and a last line still being written.
TEST(RunReport, LiveRunShowsWhatIsLoggedAndSaysWhatIsNotYet) {
  test::TempDir tmp;
  std::ifstream in(run_fixture() + "/metrics.jsonl");
  std::string line, text;
  for (int i = 0; i < 5 && std::getline(in, line); ++i) text += line + "\n";
  std::ofstream(tmp.path() + "/metrics.jsonl") << text << "{\"epoch\":0,\"loss\":0.5,\"spl";
  const RunData run = read_run_dir(tmp.path());
  EXPECT_EQ(run.train.size() + run.evals.size(), 5u);
  EXPECT_TRUE(run.summary.is_null());
  const std::string html = render_page(run_page(run));
  EXPECT_EQ(declared_points(figure(html, "run-lr")), static_cast<int>(run.train.size()));
  EXPECT_NE(html.find("not recorded: the memory plan (summary.json, written when the run ends)"),
            std::string::npos);
  EXPECT_NE(html.find("not recorded: input-wait fraction"), std::string::npos);
  EXPECT_NE(html.find("not recorded: config.yaml"), std::string::npos);
}

TEST(RunReport, MalformedMetricsLineIsNamed) {
  test::TempDir tmp;
  std::ofstream(tmp.path() + "/metrics.jsonl")
      << "{\"split\":\"train\",\"step\":1,\"loss\":1}\n{\"split\":\"train\",\"step\":2,\n";
  try {
    read_run_dir(tmp.path());
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl:2: invalid JSON"), std::string::npos)
        << e.what();
  }
  std::ofstream(tmp.path() + "/metrics.jsonl") << "{\"step\":1}\n";
  EXPECT_THROW(read_run_dir(tmp.path()), InputError);
}

TEST(RunReportCli, WritesOneSelfContainedFile) {
  test::TempDir tmp;
  const std::string out = tmp.path() + "/report.html";
  const test::CliResult r = test::run_ftune("report " + run_fixture() + " --output " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string html = test::file_bytes(out);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<style>"), std::string::npos);
  EXPECT_NE(html.find("table.sortable"), std::string::npos);  // the script, inline
  // Nothing fetched: no external scripts, stylesheets, images or fonts.
  for (const char* ref : {"src=\"http", "href=\"http", "<link", "@import", "url(", "src=\"//"})
    EXPECT_EQ(html.find(ref), std::string::npos) << ref;
}

TEST(RunReportCli, NotARunDirectoryExits2AndWritesNothing) {
  test::TempDir tmp;
  const std::string out = tmp.path() + "/report.html";
  test::CliResult r = test::run_ftune("report " + tmp.path() + " --output " + out);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("not a run directory (neither metrics.jsonl nor summary.json"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(out));
  r = test::run_ftune("report " + tmp.path() + "/none --output " + out);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("none: not a run directory (no such directory)"), std::string::npos);
  EXPECT_TRUE(fs::is_empty(tmp.path()));
}

}  // namespace
}  // namespace ftune::report
