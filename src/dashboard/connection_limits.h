// How long the dashboard's HTTP server lets a connection hold one of its workers
// (guarded_http_server.h applies them). Plain numbers, so that server.h need not include httplib.
#pragma once

namespace ftune::dashboard {

struct ConnectionLimits {
  int workers = 8;             // the thread pool's size
  double request_s = 10;       // a request line and its headers arrive within this
  double busy_grace_s = 0.25;  // ... or within this while another connection waits for a worker
  double keep_alive_s = 5;     // an idle keep-alive connection is closed after this
  double write_s = 5;          // each write of a response makes progress within this
  int max_requests = 100;      // requests served on one keep-alive connection
};

}  // namespace ftune::dashboard
