// Starting and stopping the throwaway PostgreSQL server of the storage tests.
#include "pg_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <glob.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <vector>

namespace ftune::test {

namespace {

std::string find_pg_bin() {
  glob_t g;
  std::vector<std::string> found;
  if (glob("/usr/lib/postgresql/*/bin/pg_ctl", 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) found.push_back(g.gl_pathv[i]);
    globfree(&g);
  }
  if (found.empty()) return "";
  std::sort(found.begin(), found.end());
  return std::filesystem::path(found.back()).parent_path().string();
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    throw std::runtime_error("no free port on 127.0.0.1");
  }
  close(fd);
  return ntohs(a.sin_port);
}

void run(const std::string& cmd) {
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
}

}  // namespace

PgServer* PgServer::shared(std::string* why) {
  static std::unique_ptr<PgServer> server;
  static bool tried = false;
  static std::string reason;
  if (!tried) {
    tried = true;
    const std::string bin = find_pg_bin();
    if (bin.empty()) {
      reason = "PostgreSQL server binaries not installed (/usr/lib/postgresql/*/bin)";
    } else {
      auto s = std::unique_ptr<PgServer>(new PgServer());
      s->bin_ = bin;
      char tmpl[] = "/tmp/ftune_pg_XXXXXX";
      if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
      s->dir_ = tmpl;
      if (getuid() == 0) {
        // initdb refuses to run as root: hand the directory to nobody and run as nobody.
        const passwd* pw = getpwnam("nobody");
        if (!pw || chown(tmpl, pw->pw_uid, pw->pw_gid) != 0)
          throw std::runtime_error("cannot hand the PostgreSQL test directory to user nobody");
        s->as_user_ = "runuser -u nobody -- ";
      }
      s->port_ = free_port();
      run(
          fmt::format("{}{}/initdb -D {}/data -A trust -U ftune -E UTF8 --no-sync > {}/initdb.log "
                      "2>&1",
                      s->as_user_, bin, s->dir_, s->dir_));
      run(
          fmt::format("{}{}/pg_ctl -D {}/data -l {}/server.log -w -o \"-p {} -k {} -c "
                      "listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200\" start "
                      "> /dev/null",
                      s->as_user_, bin, s->dir_, s->dir_, s->port_, s->dir_));
      server = std::move(s);
    }
  }
  if (!server && why) *why = reason;
  return server.get();
}

PgServer::~PgServer() {
  std::system(
      fmt::format("{}{}/pg_ctl -D {}/data -m immediate stop > /dev/null 2>&1", as_user_, bin_, dir_)
          .c_str());
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string PgServer::url(const std::string& db) const {
  return fmt::format("postgresql://ftune@127.0.0.1:{}/{}", port_, db);
}

std::string PgServer::fresh_database_url() {
  const std::string db = fmt::format("t{}_{}", getpid(), databases_++);
  run(fmt::format("{}/createdb -h 127.0.0.1 -p {} -U ftune {}", bin_, port_, db));
  return url(db);
}

}  // namespace ftune::test
