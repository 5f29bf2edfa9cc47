// The dashboard in a real browser (headless Chromium over the DevTools protocol, cdp_browser.h):
// over the study fixture and a real run directory, every plot is present with the right number of
// points, the trials table sorts and filters, a trial written to the storage appears without a
// reload, and a malformed database shows a clear error on the page and in the log while the
// server keeps serving. With FTUNE_SCREENSHOT_DIR set it also saves both views at 1280x800
// (docs/dashboard_study.png, docs/dashboard_run.png are made this way). Skipped, saying why,
// only where no chromium is installed (tools/install_deps.sh installs Debian's).
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>
#include <fstream>
#include <sstream>

#include "cdp_browser.h"
#include "dashboard/server.h"
#include "study_fixture.h"
#include "test_util.h"

namespace ftune::dashboard {
namespace {

using test::Browser;

class DashboardBrowser : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = Browser::find_chromium();
    if (chromium_.empty())
      GTEST_SKIP() << "chromium is not installed (Debian: apt-get install chromium; "
                      "tools/install_deps.sh installs it), so the browser tests cannot run";
    counts_ = report::test_fixture::write_study(db(), "search", 14);
    ServerOptions o;
    o.storage = "sqlite:///" + db();
    o.runs = {test::fixtures_dir() + "/report/run"};
    o.port = 0;
    o.poll_ms = 300;
    server_ = std::make_unique<Server>(o);
    server_->start();
    browser_ = std::make_unique<Browser>(chromium_, tmp_.path() + "/profile");
  }
  void TearDown() override {
    browser_.reset();
    if (server_) server_->stop();
  }
  int count(const std::string& selector) {
    return browser_->eval("document.querySelectorAll('" + selector + "').length").get<int>();
  }
  void screenshot(const std::string& name) {
    const char* dir = std::getenv("FTUNE_SCREENSHOT_DIR");
    if (!dir) return;
    std::ofstream(std::string(dir) + "/" + name, std::ios::binary) << browser_->screenshot_png();
  }
  std::string db() const { return tmp_.path() + "/study.db"; }
  std::string chromium_;
  test::TempDir tmp_;
  report::test_fixture::StudyCounts counts_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<Browser> browser_;
};

TEST_F(DashboardBrowser, StudyPlotsTableAndLiveUpdates) {
  browser_->navigate(server_->url() + "study?name=search");
  browser_->eval("document.getElementById('study-overview').querySelector('.counts')"
                 ".scrollIntoView()");
  screenshot("dashboard_study.png");
  browser_->eval("window.scrollTo(0, 0)");
  EXPECT_EQ(count("#study-history circle.pt"), counts_.complete);
  EXPECT_EQ(count("#study-history .series[data-name=\"best so far\"] polyline"), 1);
  EXPECT_EQ(count("#study-intermediate circle.pt"), counts_.intermediate);
  EXPECT_EQ(count("#study-intermediate circle.pt.pruned"), 5);
  EXPECT_EQ(count("#study-folds circle.pt"), counts_.folds);
  EXPECT_EQ(count("#study-parallel path.pc-line"), counts_.complete);
  EXPECT_EQ(count("#study-importances rect.bar"), 4);
  EXPECT_EQ(count("#study-slices-view figure.chart"), 4);
  for (const char* id : {"learning-rate", "weight-decay", "batch-size"})
    EXPECT_EQ(count(std::string("#study-slice-training-") + id + " circle.pt"), counts_.complete);
  EXPECT_EQ(count("#study-trials tbody tr"), counts_.trials);
  // The pruned marks are drawn orange (the stylesheet applied), not the series colour.
  EXPECT_EQ(browser_->eval("getComputedStyle(document.querySelector('#study-intermediate "
                           "circle.pt.pruned')).fill"),
            "rgb(217, 72, 15)");
  // Sort by value (descending on the second click) and filter by state.
  browser_->eval("document.querySelectorAll('#study-trials th')[2].click(); "
                 "document.querySelectorAll('#study-trials th')[2].click()");
  const auto values = browser_->eval(
      "Array.from(document.querySelectorAll('#study-trials tbody tr')).map(r => "
      "r.cells[2].getAttribute('data-value')).filter(v => v !== null).map(parseFloat)");
  ASSERT_EQ(static_cast<int>(values.size()), counts_.complete + counts_.pruned);
  for (size_t i = 1; i < values.size(); ++i)
    EXPECT_GE(values[i - 1].get<double>(), values[i].get<double>()) << "row " << i;
  // Trials without a value (failed, running) sort last.
  EXPECT_EQ(browser_->eval("document.querySelector('#study-trials tbody tr:last-child')"
                           ".cells[2].textContent"),
            "");
  browser_->eval("var f = document.querySelector('#study-table input.table-filter'); "
                 "f.value = 'PRUNED'; f.dispatchEvent(new Event('input'))");
  EXPECT_EQ(browser_->eval("Array.from(document.querySelectorAll('#study-trials tbody tr'))"
                           ".filter(r => r.style.display !== 'none').length"),
            counts_.pruned);
  // A trial written to the storage appears without a reload (the marker survives).
  browser_->eval("window.__not_reloaded = true");
  report::test_fixture::add_complete_trial(db(), "search", 0.95);
  EXPECT_TRUE(browser_->wait_for(
      "document.querySelectorAll('#study-history circle.pt').length === " +
          std::to_string(counts_.complete + 1),
      15));
  EXPECT_EQ(count("#study-trials tbody tr"), counts_.trials + 1);
  EXPECT_EQ(browser_->eval("window.__not_reloaded === true"), true);
  // The filter typed before the update still applies to the new table.
  EXPECT_EQ(browser_->eval("document.querySelector('#study-table input.table-filter').value"),
            "PRUNED");
}

TEST_F(DashboardBrowser, MalformedDatabaseShowsAnErrorOnThePageAndInTheLog) {
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  spdlog::default_logger()->sinks().push_back(sink);
  browser_->navigate(server_->url() + "study?name=search");
  EXPECT_EQ(browser_->eval("document.getElementById('live-error').hidden"), true);
  // Replaced in one step (a truncated file in between would read as an empty database).
  std::ofstream(db() + ".garbage") << std::string(8192, 'x');
  std::filesystem::rename(db() + ".garbage", db());
  EXPECT_TRUE(browser_->wait_for("!document.getElementById('live-error').hidden", 15));
  const std::string banner =
      browser_->eval("document.getElementById('live-error').textContent").get<std::string>();
  EXPECT_NE(banner.find("study.db"), std::string::npos) << banner;
  // SQLite says "file is not a database", or "database disk image is malformed" when it reads
  // the file while it is being overwritten or next to the old -wal/-shm files: either names it.
  const auto corrupt = [](const std::string& text) {
    return text.find("file is not a database") != std::string::npos ||
           text.find("database disk image is malformed") != std::string::npos;
  };
  EXPECT_TRUE(corrupt(banner)) << banner;
  // The last good views stay on the page.
  EXPECT_EQ(count("#study-history circle.pt"), counts_.complete);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // five more polls
  spdlog::default_logger()->sinks().pop_back();
  const std::string text = log.str();
  EXPECT_TRUE(corrupt(text)) << text;
  // Logged once per change, not once per poll (the poll runs every 300 ms).
  EXPECT_LE(std::count(text.begin(), text.end(), '\n'), 2) << text;
}

TEST_F(DashboardBrowser, RunPlots) {
  browser_->navigate(server_->url() + "run?id=0");
  browser_->eval("document.getElementById('run-training').scrollIntoView()");
  screenshot("dashboard_run.png");
  EXPECT_EQ(count("#run-loss circle.pt"), 18 + 6);  // 18 train intervals, 6 evaluations
  EXPECT_EQ(count("#run-lr circle.pt"), 18);
  EXPECT_EQ(count("#run-samples-per-s circle.pt"), 18);
  EXPECT_EQ(count("#run-tokens-per-s circle.pt"), 18);
  EXPECT_EQ(count("#run-eval circle.pt"), 36);
  EXPECT_EQ(count("#run-memory-chart rect.bar"), 18);
  EXPECT_EQ(count("#run-eval-table tbody tr"), 6);
}

}  // namespace
}  // namespace ftune::dashboard
