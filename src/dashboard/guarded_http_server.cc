// The dashboard's HTTP server that no client can hold (guarded_http_server.h).
#include "dashboard/guarded_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

namespace ftune::dashboard {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSliceMs = 50;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Waits until `fd` is ready for `events` (POLLIN or POLLOUT; an error or hang-up counts as ready:
// the next recv/send reports it) or `give_up()` holds, in slices of kSliceMs. True when ready.
template <class GiveUp>
bool wait_ready(int fd, short events, GiveUp&& give_up) {
  for (;;) {
    if (give_up()) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, kSliceMs);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

void socket_address(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  auto* sa = reinterpret_cast<sockaddr*>(&a);
  ip.clear();
  port = 0;
  if ((peer ? ::getpeername(fd, sa, &len) : ::getsockname(fd, sa, &len)) != 0) return;
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    port = ntohs(v6->sin6_port);
  }
  ip = text;
}

// One connection's socket as httplib reads and writes it, under the server's limits.
class GuardedStream final : public httplib::Stream {
 public:
  GuardedStream(int fd, const GuardedHttpServer& server) : fd_(fd), server_(server) {}
  // A new request is awaited from now on (its whole-request deadline starts).
  void start_request() { request_start_ = Clock::now(); }

  bool is_readable() const override {
    return wait_ready(fd_, POLLIN, [&] { return give_up_reading(); });
  }
  bool is_writable() const override {
    const auto start = Clock::now();
    return wait_ready(fd_, POLLOUT, [&] {
      return seconds_since(start) > server_.limits().write_s;
    });
  }
  ssize_t read(char* ptr, size_t size) override {
    if (!is_readable()) return -1;
    for (;;) {
      const ssize_t n = ::recv(fd_, ptr, size, 0);
      if (n >= 0 || errno != EINTR) return n;
    }
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    for (;;) {
      const ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
      if (n >= 0 || errno != EINTR) return n;
    }
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    socket_address(fd_, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    socket_address(fd_, false, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  // A request that is still being read is dropped past its deadline, sooner while another
  // connection waits for this worker, and at once when the server stops.
  bool give_up_reading() const {
    const double waited = seconds_since(request_start_);
    const ConnectionLimits& l = server_.limits();
    return server_.stopping() || waited > l.request_s ||
           (server_.waiting() > 0 && waited > l.busy_grace_s);
  }

  int fd_;
  const GuardedHttpServer& server_;
  Clock::time_point request_start_ = Clock::now();
};

// httplib's thread pool, counting the connections that wait for a worker.
class CountingQueue final : public httplib::TaskQueue {
 public:
  CountingQueue(size_t workers, std::atomic<int>& waiting) : pool_(workers), waiting_(waiting) {}
  void enqueue(std::function<void()> fn) override {
    ++waiting_;
    pool_.enqueue([this, fn = std::move(fn)] {
      --waiting_;
      fn();
    });
  }
  void shutdown() override { pool_.shutdown(); }

 private:
  httplib::ThreadPool pool_;
  std::atomic<int>& waiting_;
};

}  // namespace

GuardedHttpServer::GuardedHttpServer(ConnectionLimits limits) : limits_(limits) {
  new_task_queue = [this] {
    return new CountingQueue(static_cast<size_t>(limits_.workers), waiting_);
  };
}

void GuardedHttpServer::stop_serving() {
  stopping_ = true;
  stop();
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  GuardedStream stream(sock, *this);
  bool ok = false;
  for (int served = 0; served < limits_.max_requests; ++served) {
    if (served > 0) {
      // An idle keep-alive connection keeps its worker only while nobody else needs it.
      const auto idle_since = Clock::now();
      if (!wait_ready(sock, POLLIN, [&] {
            return stopping() || waiting() > 0 || seconds_since(idle_since) > limits_.keep_alive_s;
          }))
        break;
    }
    stream.start_request();
    const bool last = served + 1 == limits_.max_requests || waiting() > 0 || stopping();
    bool closed = false;
    ok = process_request(stream, last, closed, nullptr);
    if (!ok || closed || last) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace ftune::dashboard
