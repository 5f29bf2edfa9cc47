// The tests' HTTP client (http_client.h).
#include "http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace ftune::test {
namespace {

int connect_local(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int http_connect(int port) { return connect_local(port); }

bool http_send(int fd, const std::string& data) { return send_all(fd, data); }

HttpResponse http_get(int port, const std::string& target) {
  return http_raw(port, "GET " + target + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
}

HttpResponse http_raw(int port, const std::string& request) {
  const int fd = connect_local(port);
  if (fd < 0) return {};
  HttpResponse r;
  if (send_all(fd, request)) r = http_read_response(fd);
  close(fd);
  return r;
}

HttpResponse http_read_response(int fd) {
  HttpResponse r;
  {
    std::string raw;
    char buf[65536];
    ssize_t n;
    // Until the server closes, or the body's Content-Length is in (a server may keep the
    // connection after an error answer).
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
      raw.append(buf, static_cast<size_t>(n));
      const size_t end = raw.find("\r\n\r\n");
      const size_t cl = raw.find("Content-Length: ");
      if (end != std::string::npos && cl != std::string::npos && cl < end &&
          raw.size() >= end + 4 + std::stoul(raw.substr(cl + 16)))
        break;
    }
    if (raw.rfind("HTTP/1.", 0) == 0 && raw.size() > 12) r.status = std::atoi(raw.c_str() + 9);
    const size_t body = raw.find("\r\n\r\n");
    if (body != std::string::npos) r.body = raw.substr(body + 4);
  }
  return r;
}

void http_abort(int port, const std::string& raw, size_t read_bytes) {
  const int fd = connect_local(port);
  if (fd < 0) return;
  send_all(fd, raw);
  std::string got;
  char buf[512];
  while (got.size() < read_bytes) {
    const ssize_t n = recv(fd, buf, std::min(sizeof buf, read_bytes - got.size()), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  linger hard{1, 0};  // close with RST, as a browser tab that is closed mid-download
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  close(fd);
}

}  // namespace ftune::test
