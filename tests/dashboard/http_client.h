// A minimal HTTP/1.0 client over a plain socket for the dashboard's tests: whole responses, and
// the misbehaving clients a server must survive (a request cut off, a client that reads a little
// of a response and resets the connection).
#pragma once

#include <string>

namespace ftune::test {

struct HttpResponse {
  int status = 0;  // 0: no answer (connection failed)
  std::string body;
};

// GET `target` ("/path?query") from 127.0.0.1:port.
HttpResponse http_get(int port, const std::string& target);
// Sends `raw` (a whole request) and reads the answer.
HttpResponse http_raw(int port, const std::string& raw);
// Opens a connection to 127.0.0.1:port (-1 on failure), with 10 s send and receive timeouts.
int http_connect(int port);
// Sends all of `data` on `fd`; false when the connection fails.
bool http_send(int fd, const std::string& data);
// Reads one answer from `fd` (until it closes or its Content-Length is in).
HttpResponse http_read_response(int fd);
// Sends `raw` bytes, reads at most `read_bytes` of the answer, then resets the connection (RST).
void http_abort(int port, const std::string& raw, size_t read_bytes);

}  // namespace ftune::test
