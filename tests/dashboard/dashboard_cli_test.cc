// `ftune dashboard` as a command: it logs where it serves, warns when bound to an address other
// machines can reach, stops cleanly on SIGTERM, and refuses a command line with nothing to serve.
#include <gtest/gtest.h>
#include <signal.h>

#include "run_cli.h"
#include "test_util.h"

namespace ftune {
namespace {

TEST(DashboardCli, WarnsOffLocalhostAndStopsOnSigterm) {
  test::TempDir tmp;
  for (const char* host : {"127.0.0.1", "0.0.0.0"}) {
    SCOPED_TRACE(host);
    const std::string log = tmp.path() + "/" + host + ".log";
    const pid_t pid = test::spawn_ftune(std::string("dashboard --port 0 --host ") + host +
                                            " --runs " + test::fixtures_dir() + "/report/run",
                                        log);
    ASSERT_TRUE(test::wait_for_text(log, "dashboard: serving on http://", 30));
    const std::string text = test::file_bytes(log);
    const bool warned = text.find("reachable from other machines") != std::string::npos;
    EXPECT_EQ(warned, std::string(host) == "0.0.0.0") << text;
    kill(pid, SIGTERM);
    EXPECT_EQ(test::wait_ftune(pid), 0);
  }
}

TEST(DashboardCli, NothingToServeIsAnError) {
  const test::CliResult r = test::run_ftune("dashboard --port 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("give --storage URL, --runs DIR ..., or both"), std::string::npos);
}

}  // namespace
}  // namespace ftune
