// `ftune dashboard`'s server (dashboard/server.h) in process, over the study fixture and a real run
// directory: it serves the views and their JSON; unknown paths, a 20 KB query string, 48 parallel
// clients, clients that reset the connection mid-response or cut their request off, a malformed
// database and a database locked by another process all leave it serving, with the errors on the page and in the log.
#include "dashboard/server.h"

#include <gtest/gtest.h>

#include <sqlite3.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "http_client.h"
#include "study_fixture.h"
#include "test_util.h"

namespace ftune::dashboard {
namespace {

using test::http_get;

class DashboardServer : public ::testing::Test {
 protected:
  void SetUp() override {
    report::test_fixture::write_study(db(), "search", 14);
    ServerOptions o;
    o.storage = "sqlite:///" + db();
    o.runs = {test::fixtures_dir() + "/report/run"};
    o.port = 0;
    server_ = std::make_unique<Server>(o);
    server_->start();
    port_ = server_->port();
  }
  void TearDown() override { server_->stop(); }
  std::string db() const { return tmp_.path() + "/study.db"; }
  void expect_serving() {
    const test::HttpResponse r = http_get(port_, "/");
    EXPECT_EQ(r.status, 200);
    EXPECT_NE(r.body.find("href=\"/study?name=search\""), std::string::npos);
  }
  test::TempDir tmp_;
  std::unique_ptr<Server> server_;
  int port_ = 0;
};

TEST_F(DashboardServer, ServesViewsAndTheirSections) {
  expect_serving();
  test::HttpResponse r = http_get(port_, "/study?name=search");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("id=\"study-history\""), std::string::npos);
  EXPECT_NE(r.body.find("data-api=\"/api/study?name=search\""), std::string::npos);
  r = http_get(port_, "/api/study?name=search");
  ASSERT_EQ(r.status, 200);
  const auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["error"], "");
  EXPECT_EQ(j["sections"].size(), 9u);  // the study views (study_view.h), the cost curve among them
  r = http_get(port_, "/run?id=0");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("id=\"run-loss\""), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(http_get(port_, "/api/run?id=0").body)["sections"].size(), 7u);
}

TEST_F(DashboardServer, BadRequestsAreAnsweredAndItKeepsServing) {
  EXPECT_EQ(http_get(port_, "/no/such/page").status, 404);
  EXPECT_EQ(http_get(port_, "/../../etc/passwd").status, 404);
  test::HttpResponse r = http_get(port_, "/run?id=7");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("no run 7 (the dashboard serves runs 0 to 0)"), std::string::npos);
  EXPECT_EQ(http_get(port_, "/run?id=-1").status, 404);
  r = http_get(port_, "/api/study?name=nope");
  EXPECT_NE(nlohmann::json::parse(r.body)["error"].get<std::string>().find(
                "no study named 'nope' (studies: search)"),
            std::string::npos);
  EXPECT_EQ(http_get(port_, "/?q=" + std::string(20000, 'a')).status, 414);
  expect_serving();
}

TEST_F(DashboardServer, ManyParallelClients) {
  constexpr int kClients = 48;
  std::vector<int> status(kClients, 0);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i)
    clients.emplace_back([&, i] {
      status[i] = http_get(port_, i % 2 ? "/api/study?name=search" : "/run?id=0").status;
    });
  for (auto& t : clients) t.join();
  for (int i = 0; i < kClients; ++i) EXPECT_EQ(status[i], 200) << "client " << i;
  expect_serving();
}

TEST_F(DashboardServer, ClientsThatGoAwayMidResponse) {
  for (int i = 0; i < 20; ++i) {
    // Reads 100 bytes of a 100+ KB page, then resets the connection.
    test::http_abort(port_, "GET /study?name=search HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 100);
    // A request line cut off half-way.
    test::http_abort(port_, "GET /study?na", 0);
  }
  expect_serving();
  EXPECT_EQ(http_get(port_, "/api/study?name=search").status, 200);
}

TEST_F(DashboardServer, MalformedDatabaseIsAnErrorOnThePageNotACrash) {
  std::string error;
  {
    std::ofstream(db(), std::ios::trunc) << std::string(8192, 'x');
    const test::HttpResponse r = http_get(port_, "/api/study?name=search");
    ASSERT_EQ(r.status, 200);
    error = nlohmann::json::parse(r.body)["error"].get<std::string>();
    EXPECT_NE(error.find("study.db"), std::string::npos) << error;
    EXPECT_TRUE(error.find("not a database") != std::string::npos ||
                error.find("malformed") != std::string::npos)
        << error;
    const test::HttpResponse page = http_get(port_, "/study?name=search");
    EXPECT_EQ(page.status, 200);
    EXPECT_NE(page.body.find("<div id=\"live-error\" class=\"error\">"), std::string::npos);
  }
  const test::HttpResponse index = http_get(port_, "/");
  EXPECT_EQ(index.status, 200);
  EXPECT_NE(index.body.find("study.db"), std::string::npos);
  EXPECT_EQ(http_get(port_, "/run?id=0").status, 200);
}

// Another process holding the database under an exclusive lock: an error on the page within
// seconds (not a request stuck for minutes), and the views come back once the lock is released.
TEST_F(DashboardServer, LockedDatabaseIsAnErrorThenRecovers) {
  sqlite3* holder = nullptr;
  ASSERT_EQ(sqlite3_open(db().c_str(), &holder), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(holder,
                         "PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE; "
                         "UPDATE trials SET number = number WHERE 0;",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(holder);
  const auto start = std::chrono::steady_clock::now();
  test::HttpResponse r = http_get(port_, "/api/study?name=search");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ASSERT_EQ(r.status, 200);
  const std::string error = nlohmann::json::parse(r.body)["error"].get<std::string>();
  EXPECT_NE(error.find("study.db: the study database is locked by another process"),
            std::string::npos)
      << error;
  EXPECT_NE(http_get(port_, "/").body.find("locked by another process"), std::string::npos);
  sqlite3_exec(holder, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close(holder);
  r = http_get(port_, "/api/study?name=search");
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"], "");
  expect_serving();
}

TEST(DashboardHosts, LoopbackAddresses) {
  EXPECT_TRUE(is_loopback("127.0.0.1"));
  EXPECT_TRUE(is_loopback("localhost"));
  EXPECT_TRUE(is_loopback("::1"));
  EXPECT_FALSE(is_loopback("0.0.0.0"));
  EXPECT_FALSE(is_loopback("192.168.1.5"));
}

}  // namespace
}  // namespace ftune::dashboard
