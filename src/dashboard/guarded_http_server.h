// An httplib::Server whose clients cannot hold its workers. Debian 12's cpp-httplib (0.11) bounds
// each read of a request (5 s) but not the request as a whole, and keeps an idle keep-alive
// connection on its worker for 5 s: with its 8 workers, 8 clients that trickle a header byte every
// few seconds (slowloris), or 8 pages polling every 2 s over keep-alive, lock every other client
// out, and stop() waits for all of them. So this server reads its connections itself
// (process_and_close_socket, handing each request to the library's process_request), through a
// stream whose reads end
//   - at a deadline for the whole request (Limits::request_s from the moment it is awaited),
//   - while another connection waits for a worker: a request still unread after busy_grace_s, and
//     an idle keep-alive connection, are closed at once (the response in progress is finished,
//     with "Connection: close"),
//   - when stop() begins: every connection that is not inside a handler closes.
// Poll slices of 50 ms make each of these take effect within that time. Only this file and
// server.cc include httplib.h (its classes' layout depends on the flags CMake gives them).
#pragma once

#include <httplib.h>

#include <atomic>

#include "dashboard/connection_limits.h"

namespace ftune::dashboard {

class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(ConnectionLimits limits = {});
  // Connections close as soon as they are outside a handler; then httplib's stop().
  void stop_serving();
  // Connections accepted and waiting for a worker.
  int waiting() const { return waiting_.load(); }
  bool stopping() const { return stopping_.load(); }
  const ConnectionLimits& limits() const { return limits_; }

 private:
  bool process_and_close_socket(socket_t sock) override;

  ConnectionLimits limits_;
  std::atomic<int> waiting_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace ftune::dashboard
