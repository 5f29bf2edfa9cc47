// `ftune report --storage URL --study NAME`: the study views over a study written by ftune's
// storage (study_fixture.h). Each chart holds one mark per trial value it shows; pruned trials are
// marked; the table has a row per trial; the state counts match; bad storages are errors that
// name them, never created.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "report/study_view.h"
#include "html_probe.h"
#include "pg_server.h"
#include "run_cli.h"
#include "study_fixture.h"
#include "test_util.h"

namespace ftune::report {
namespace {

namespace fs = std::filesystem;

using test_html::count;
using test_html::declared_points;
using test_html::figure;

class StudyReport : public ::testing::Test {
 protected:
  void SetUp() override {
    counts_ = test_fixture::write_study(db(), "search", 14);
  }
  std::string db() const { return tmp_.path() + "/study.db"; }
  test::TempDir tmp_;
  test_fixture::StudyCounts counts_;
};

TEST_F(StudyReport, EveryViewHoldsItsTrials) {
  ASSERT_EQ(counts_.retries, 1);
  const StudyData study = read_study("sqlite:///" + db(), "search");
  ASSERT_EQ(static_cast<int>(study.trials.size()), counts_.trials);
  const std::string html = render_page(study_page(study));
  // History: one point per complete trial; the best-so-far line draws no extra marks.
  const std::string history = figure(html, "study-history");
  EXPECT_EQ(declared_points(history), counts_.complete);
  EXPECT_EQ(static_cast<int>(count(history, "<circle class=\"pt")), counts_.complete);
  EXPECT_NE(history.find("data-name=\"best so far\""), std::string::npos);
  // Intermediate values: every report, the pruned trials' ones marked.
  const std::string inter = figure(html, "study-intermediate");
  EXPECT_EQ(declared_points(inter), counts_.intermediate);
  EXPECT_EQ(static_cast<int>(count(inter, "<circle class=\"pt")), counts_.intermediate);
  EXPECT_EQ(static_cast<int>(count(inter, "<g class=\"series s")), counts_.reporting);
  EXPECT_EQ(static_cast<int>(count(inter, "<g class=\"series s")), 14);
  // The fixture prunes its 4th, 9th and 14th trials after 2, 1 and 2 reports.
  EXPECT_EQ(count(inter, "<circle class=\"pt pruned\""), 5u);
  // Per-fold values, parallel coordinates (one line per complete trial), slices, importances.
  EXPECT_EQ(declared_points(figure(html, "study-folds")), counts_.folds);
  const std::string parallel = figure(html, "study-parallel");
  EXPECT_EQ(declared_points(parallel), counts_.complete);
  EXPECT_EQ(static_cast<int>(count(parallel, "<path class=\"pc-line\"")), counts_.complete);
  EXPECT_EQ(count(parallel, "<line class=\"pc-axis\""), 5u);  // 4 parameters + the objective
  for (const char* id : {"study-slice-training-learning-rate", "study-slice-training-weight-decay",
                         "study-slice-training-batch-size", "study-slice-model-layers"}) {
    SCOPED_TRACE(id);
    const std::string slice = figure(html, id);
    EXPECT_EQ(declared_points(slice), counts_.complete);
    EXPECT_EQ(static_cast<int>(count(slice, "<circle class=\"pt")), counts_.complete);
  }
  EXPECT_EQ(declared_points(figure(html, "study-importances")), 4);
  // The best value against compute and wall time: one point per new best, in each series.
  const std::string cost = figure(html, "study-cost");
  const int improvements = static_cast<int>(count(cost, "<circle class=\"pt"));
  EXPECT_GE(improvements, 1);
  EXPECT_LE(improvements, counts_.complete);
  EXPECT_EQ(declared_points(cost), improvements);  // markers on the compute series only
  EXPECT_NE(html.find("of trial time (complete "), std::string::npos);
  // State counts and the table.
  EXPECT_NE(html.find(fmt::format("complete: <b>{}</b>", counts_.complete)), std::string::npos);
  EXPECT_NE(html.find(fmt::format("pruned: <b>{}</b>", counts_.pruned)), std::string::npos);
  EXPECT_NE(html.find("failed: <b>1</b>"), std::string::npos);
  EXPECT_NE(html.find("running: <b>1</b>"), std::string::npos);
  EXPECT_NE(html.find("retries: <b>1</b>"), std::string::npos);
  const size_t table = html.find("id=\"study-trials\"");
  ASSERT_NE(table, std::string::npos);
  const std::string rows = html.substr(table, html.find("</table>", table) - table);
  EXPECT_EQ(static_cast<int>(count(rows, "<tr class=\"state-")), counts_.trials);
  EXPECT_EQ(count(rows, "<tr class=\"state-PRUNED\""), static_cast<size_t>(counts_.pruned));
  EXPECT_NE(rows.find("CUDA out of memory"), std::string::npos);
  EXPECT_NE(rows.find("<th>fold 2</th>"), std::string::npos);
}

TEST_F(StudyReport, CliWritesTheFileAndRefusesBadStorages) {
  const std::string out = tmp_.path() + "/study.html";
  test::CliResult r = test::run_ftune("report --storage " + db() + " --output " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;  // the only study, found without --study
  EXPECT_NE(test::file_bytes(out).find("id=\"study-parallel\""), std::string::npos);
  r = test::run_ftune("report --storage " + db() + " --study nope --output " + out + ".2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("no study named 'nope' (studies: search)"), std::string::npos) << r.output;
  // A storage that does not exist is not created; a file that is not a database is named.
  r = test::run_ftune("report --storage " + tmp_.path() + "/missing.db --output " + out + ".3");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("missing.db: no such study storage"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(tmp_.path() + "/missing.db"));
  std::ofstream(tmp_.path() + "/garbage.db") << std::string(4096, 'x');
  r = test::run_ftune("report --storage " + tmp_.path() + "/garbage.db --output " + out + ".4");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("garbage.db"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out + ".2") || fs::exists(out + ".3") || fs::exists(out + ".4"));
  r = test::run_ftune("report --output " + out);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("name a run directory or a study storage"), std::string::npos);
}

// The same views from a PostgreSQL storage (the study written there by the same fixture).
TEST(StudyReportPostgres, ReadsAPostgresStudy) {
  std::string why;
  test::PgServer* pg = test::PgServer::shared(&why);
  if (!pg) GTEST_SKIP() << why;
  const std::string url = pg->fresh_database_url();
  const test_fixture::StudyCounts counts = test_fixture::write_study(url, "search", 14);
  const StudyData study = read_study(url, "search");
  EXPECT_EQ(static_cast<int>(study.trials.size()), counts.trials);
  const std::string html = render_page(study_page(study));
  EXPECT_EQ(declared_points(figure(html, "study-history")), counts.complete);
  EXPECT_EQ(declared_points(figure(html, "study-intermediate")), counts.intermediate);
  EXPECT_EQ(declared_points(figure(html, "study-folds")), counts.folds);
}

}  // namespace
}  // namespace ftune::report
