// A throwaway PostgreSQL server for tests: initdb into a temporary directory, pg_ctl start on
// 127.0.0.1 at a free port (as user nobody when the tests run as root, since initdb refuses root),
// one fresh database per test, stopped and removed at exit. Tests skip only when the server
// binaries are not installed (tools/install_deps.sh installs them).
#pragma once

#include <string>

namespace ftune::test {

class PgServer {
 public:
  // The server shared by all tests of this process, started on first use; nullptr with
  // `why` set when the PostgreSQL binaries are absent. A failing start is a test failure.
  static PgServer* shared(std::string* why);
  ~PgServer();

  // A new empty database; its postgresql:// URL.
  std::string fresh_database_url();
  std::string url(const std::string& db) const;
  int port() const { return port_; }

 private:
  PgServer() = default;
  std::string bin_, dir_, as_user_;
  int port_ = 0;
  int databases_ = 0;
};

}  // namespace ftune::test
