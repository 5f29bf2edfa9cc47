// How long the dashboard's HTTP server lets a connection hold one of its workers
// (guarded_http_server.h applies them). Plain numbers, so that server.h need not include httplib.
#pragma once

namespace ftune::dashboard {

struct ConnectionLimits {
  int workers = 8;             // the thread pool's size
  double request_s = 10;       // a request line and its headers arrive within this
  // ... or within this while another connection waits for a worker. Counted from when a worker
  // takes the connection, which can be before a client on a busy machine is scheduled to send its
  // request: 0.25 s cut off one of 48 parallel clients in a loaded test run
  // (DashboardServer.ManyParallelClients, twice in ~10 full runs); a slowloris client still frees
  // its worker within this.
  double busy_grace_s = 1.0;
  double keep_alive_s = 5;     // an idle keep-alive connection is closed after this
  double write_s = 5;          // each write of a response makes progress within this
  int max_requests = 100;      // requests served on one keep-alive connection
};

}  // namespace ftune::dashboard
