// The dashboard server under clients that would hold it (issue 35, items 8–10): more slow and
// keep-alive clients than it has workers leave it answering others and stopping promptly; request
// text cannot grow it or forge its log; a foreign Host header, a linked run file and bytes that are
// not UTF-8 get the answers they should.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "dashboard/live_views.h"
#include "dashboard/log_text.h"
#include "dashboard/server.h"
#include "http_client.h"
#include "run_cli.h"
#include "study_fixture.h"
#include "test_util.h"

namespace ftune::dashboard {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Clients that hold connections open until stopped: slowloris ones trickle a header byte every
// 500 ms and never finish their request; keep-alive ones ask for a page over HTTP/1.1 every
// 500 ms on one connection, as the dashboard's own pages poll (faster, to keep it busier).
class HoldingClients {
 public:
  HoldingClients(int port, int slow, int keep_alive) {
    for (int i = 0; i < slow; ++i)
      threads_.emplace_back([this, port] {
        const int fd = test::http_connect(port);
        if (fd < 0) return;
        test::http_send(fd, "GET /api/run?id=0 HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        while (!stop_ && test::http_send(fd, "X")) nap();
        close(fd);
      });
    for (int i = 0; i < keep_alive; ++i)
      threads_.emplace_back([this, port] {
        int fd = -1;
        while (!stop_) {
          if (fd < 0) fd = test::http_connect(port);
          if (fd < 0) break;
          if (!test::http_send(fd, "GET /api/run?id=0 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") ||
              test::http_read_response(fd).status != 200) {
            close(fd);  // closed by the server: reconnect, as a browser does
            fd = -1;
            continue;
          }
          nap();
        }
        if (fd >= 0) close(fd);
      });
  }
  ~HoldingClients() { stop(); }
  void stop() {
    stop_ = true;
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void nap() { std::this_thread::sleep_for(std::chrono::milliseconds(500)); }
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

class DashboardLimits : public ::testing::Test {
 protected:
  void start(ServerOptions o = {}) {
    report::test_fixture::write_study(tmp_.path() + "/study.db", "search", 3);
    o.storage = "sqlite:///" + tmp_.path() + "/study.db";
    if (o.runs.empty()) o.runs = {test::fixtures_dir() + "/report/run"};
    o.port = 0;
    server_ = std::make_unique<Server>(o);
    server_->start();
    port_ = server_->port();
  }
  void TearDown() override {
    if (server_) server_->stop();
  }
  test::TempDir tmp_;
  std::unique_ptr<Server> server_;
  int port_ = 0;
};

// 12 slowloris and 12 keep-alive clients against 8 workers: every other request is still answered
// (before, each waited until the holders let go: the client's 10 s receive timeout, status 0).
TEST_F(DashboardLimits, MoreHoldingClientsThanWorkersLeaveItAnswering) {
  start();
  HoldingClients holders(port_, 12, 12);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  for (int i = 0; i < 5; ++i) {
    const test::HttpResponse r = test::http_get(port_, i % 2 ? "/" : "/api/study?name=search");
    EXPECT_EQ(r.status, 200) << "request " << i;
  }
  holders.stop();
}

// A stop with slow clients connected ends at once (before: it waited for every slow client,
// 39 s in the case; here the clients would hold it as long as the test lets them).
TEST_F(DashboardLimits, StopsPromptlyWithSlowClientsConnected) {
  start();
  HoldingClients holders(port_, 12, 4);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const auto begin = Clock::now();
  server_->stop();
  const double took = seconds_since(begin);
  server_.reset();
  holders.stop();
  EXPECT_LT(took, 3.0) << "stop() took " << took << " s";
}

// A request still unfinished after ConnectionLimits::request_s is dropped even when nobody waits.
TEST_F(DashboardLimits, AnUnfinishedRequestIsDroppedAtItsDeadline) {
  ServerOptions o;
  o.limits.request_s = 1;
  start(o);
  const int fd = test::http_connect(port_);
  ASSERT_GE(fd, 0);
  const auto begin = Clock::now();
  bool open = true;
  while (open && seconds_since(begin) < 8) {
    open = test::http_send(fd, "X");
    char c;
    // The server's close shows as end of stream (0) on a non-blocking peek.
    if (recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK) == 0) open = false;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  close(fd);
  EXPECT_FALSE(open) << "a trickling request was still connected after 8 s";
  EXPECT_LT(seconds_since(begin), 5.0);
}

TEST(DashboardLogText, EscapesControlBytesAndCuts) {
  EXPECT_EQ(log_text("search"), "search");
  EXPECT_EQ(log_text("a\nb\x1b[31mc\\"), "a\\x0ab\\x1b[31mc\\x5c");
  EXPECT_EQ(log_text("caf\xc3\xa9"), "caf\\xc3\\xa9");
  EXPECT_EQ(log_text(std::string(7000, 'n'), 10), "nnnnnnnnnn...(6990 more bytes)");
}

// Requests for ever new study names: each an error remembered to log once, but at most a bounded
// number of them (before: every name kept for ever, ~15.6 KB of memory for a 7 KB name).
TEST_F(DashboardLimits, PerViewStateIsBounded) {
  report::test_fixture::write_study(tmp_.path() + "/study.db", "search", 3);
  const Views views("sqlite:///" + tmp_.path() + "/study.db", {}, 2000);
  for (int i = 0; i < 1000; ++i) {
    const nlohmann::json j = views.study_sections("name-" + std::to_string(i) + std::string(500, 'x'));
    EXPECT_NE(j["error"].get<std::string>().find("no study named"), std::string::npos);
  }
  EXPECT_LE(views.remembered_views(), 256u);
  EXPECT_GE(views.remembered_views(), 200u);  // it does remember recent ones
}

// Bytes that are not UTF-8 in a name: the JSON error the page expects, not a 500 HTML page.
TEST_F(DashboardLimits, NonUtf8NameGetsAJsonError) {
  start();
  const test::HttpResponse r = test::http_get(port_, "/api/study?name=%ff%fe");
  EXPECT_EQ(r.status, 200);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.body)) << r.body;
  EXPECT_NE(j["error"].get<std::string>().find("no study named"), std::string::npos);
}

TEST(DashboardHost, LoopbackNamesOnly) {
  for (const char* h : {"", "localhost", "LOCALHOST:8080", "127.0.0.1", "127.0.0.1:18081",
                        "127.9.8.7:1", "[::1]", "[::1]:8080"})
    EXPECT_TRUE(host_header_allowed(h)) << h;
  for (const char* h : {"evil.example", "evil.example:8080", "127.0.0.1.evil.example",
                        "127.evil.example", "10.0.0.1", "[::2]:80", "localhost:80x", "[::1",
                        "localhost:"})
    EXPECT_FALSE(host_header_allowed(h)) << h;
  EXPECT_FALSE(is_loopback("127.evil.example"));
  EXPECT_TRUE(is_loopback("::1"));
}

// DNS rebinding: a page on evil.example whose name resolves to 127.0.0.1 reads nothing.
TEST_F(DashboardLimits, ForeignHostHeaderIsRefusedOnLoopback) {
  start();
  test::HttpResponse r = test::http_raw(
      port_, "GET /api/study?name=search HTTP/1.0\r\nHost: evil.example:" +
                 std::to_string(port_) + "\r\n\r\n");
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.body.find("search"), std::string::npos);
  r = test::http_raw(port_, "GET /api/study?name=search HTTP/1.0\r\nHost: localhost:" +
                                std::to_string(port_) + "\r\n\r\n");
  EXPECT_EQ(r.status, 200);
}

// config.yaml -> a file outside the run directory: refused by name, its text never served.
TEST_F(DashboardLimits, LinkedRunFilesAreNotRead) {
  const fs::path run = fs::path(tmp_.path()) / "run";
  fs::copy(test::fixtures_dir() + "/report/run", run, fs::copy_options::recursive);
  std::ofstream(tmp_.path() + "/secret.txt") << "TOP-SECRET-LINE\n";
  fs::remove(run / "config.yaml");
  fs::create_symlink(fs::path(tmp_.path()) / "secret.txt", run / "config.yaml");
  ServerOptions o;
  o.runs = {run.string()};
  start(o);
  const test::HttpResponse r = test::http_get(port_, "/api/run?id=0");
  EXPECT_EQ(r.body.find("TOP-SECRET-LINE"), std::string::npos);
  EXPECT_NE(r.body.find("is a symbolic link"), std::string::npos) << r.body;
  EXPECT_EQ(test::http_get(port_, "/run?id=0").body.find("TOP-SECRET-LINE"), std::string::npos);
}

TEST(DashboardHostOption, EmptyHostIsRefused) {
  const test::CliResult r = test::run_ftune(
      "dashboard --port 0 --host '' --runs " + test::fixtures_dir() + "/report/run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--host must name an address"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ftune::dashboard
