// `ftune dashboard`: a small HTTP server (cpp-httplib, Debian's libcpp-httplib) serving the study
// and run views of src/report/ as pages that update themselves while trials and runs progress:
// each page polls a JSON endpoint with its sections and swaps the ones that changed. Read-only
// over the storage and the run directories; every request reads them afresh, so a database that
// is locked or malformed shows as an error on the page (and in the log) and the page recovers
// when the database does.
//
//   GET /                       index: the storage's studies and the run directories
//   GET /study?name=NAME        a study's views          GET /api/study?name=NAME  its sections
//   GET /run?id=N               run directory N's views  GET /api/run?id=N         its sections
//
// Limits (docs/reliability.md "The dashboard"): each connection holds a worker for one request at a time,
// bounded in time (connection_limits.h); request text is logged escaped and cut; per-view state
// is bounded; run-directory files are read only when they are regular files, never through links.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dashboard/connection_limits.h"

namespace ftune::dashboard {

struct ServerOptions {
  std::string storage;             // study storage URL ("" = none)
  std::vector<std::string> runs;   // run directories
  std::string host = "127.0.0.1";  // other addresses are reachable from other machines: warned
  int port = 8080;                 // 0: any free port (port() says which)
  int poll_ms = 2000;              // how often the pages ask for fresh sections
  ConnectionLimits limits;         // how long one connection may hold a worker
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  // Binds (InputError naming host:port when it cannot) and serves on a background thread.
  void start();
  // Stops accepting and waits for the serving thread.
  void stop();
  int port() const;
  std::string url() const;  // http://host:port/

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether `host` is a loopback address (127.0.0.0/8, ::1, localhost).
bool is_loopback(const std::string& host);
// Whether a request's Host header ("localhost:8080", "[::1]:80", "127.0.0.1") names a loopback
// address, or is absent: what a server bound to loopback answers. A page on another site whose
// name its DNS points at 127.0.0.1 (DNS rebinding) sends its own name and is refused.
bool host_header_allowed(const std::string& header);

}  // namespace ftune::dashboard
