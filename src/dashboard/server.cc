// The dashboard's HTTP server (server.h). cpp-httplib answers malformed requests itself (400, or
// 414 for a request line over 8 KiB) and runs handlers on a thread pool; GuardedHttpServer bounds
// how long a connection may hold a worker (slow, idle and keep-alive clients). Handlers here never
// throw past the library (a view that cannot be read is an error page or an "error" field,
// logged with its request text escaped: log_text.h), JSON is always valid UTF-8, and SIGPIPE is
// ignored by the command so a client closing mid-response cannot end the process. On loopback,
// a request whose Host header names another machine is refused (a DNS-rebinding page).
#include "dashboard/server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "dashboard/guarded_http_server.h"
#include "dashboard/live_views.h"
#include "dashboard/log_text.h"
#include "report/svg_chart.h"

namespace ftune::dashboard {

struct Server::Impl {
  explicit Impl(ServerOptions o) : options(std::move(o)), http(options.limits) {}
  ServerOptions options;
  GuardedHttpServer http;
  std::thread thread;
  int port = 0;
};

bool is_loopback(const std::string& host) {
  std::string lower(host);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "localhost" || lower == "localhost.") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

bool host_header_allowed(const std::string& header) {
  if (header.empty()) return true;  // HTTP/1.0 clients may omit it; browsers always send it
  std::string name, port;
  if (header.front() == '[') {
    const size_t end = header.find(']');
    if (end == std::string::npos) return false;
    name = header.substr(1, end - 1);
    port = header.substr(end + 1);
  } else {
    const size_t colon = header.rfind(':');
    name = header.substr(0, colon);
    port = colon == std::string::npos ? "" : header.substr(colon);
  }
  if (!port.empty() && (port.size() == 1 || port.size() > 6 ||
                        !std::all_of(port.begin() + 1, port.end(),
                                     [](unsigned char c) { return std::isdigit(c); })))
    return false;
  return is_loopback(name);
}

namespace {

constexpr size_t kMaxBody = 64 * 1024;  // the dashboard takes no uploads

void send_html(httplib::Response& res, int status, const std::string& html) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(html, "text/html; charset=utf-8");
}

// Request text (a study name) may be any bytes: invalid UTF-8 becomes U+FFFD rather than an
// exception, so the answer is always the JSON the page expects.
void send_json(httplib::Response& res, const nlohmann::json& j) {
  res.set_header("Cache-Control", "no-store");
  res.set_content(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  "application/json");
}

}  // namespace

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Server::~Server() { stop(); }

void Server::start() {
  Impl& m = *impl_;
  if (m.options.host.empty())
    throw InputError("dashboard: --host must name an address to bind (127.0.0.1, ::1, 0.0.0.0, "
                     "...), got an empty string");
  const Views views(m.options.storage, m.options.runs, m.options.poll_ms);
  GuardedHttpServer& http = m.http;
  http.set_payload_max_length(kMaxBody);
  if (is_loopback(m.options.host))
    http.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
      const std::string host = req.get_header_value("Host");
      if (host_header_allowed(host)) return httplib::Server::HandlerResponse::Unhandled;
      spdlog::warn("dashboard: {} {} refused: Host '{}' is not this machine", req.method,
                   log_text(req.path), log_text(host));
      res.status = 403;
      res.set_content("the dashboard answers requests for localhost only", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    });
  http.Get("/", [views](const httplib::Request&, httplib::Response& res) {
    send_html(res, 200, views.index_page());
  });
  http.Get("/study", [views](const httplib::Request& req, httplib::Response& res) {
    const ViewResult r = views.study_page(req.get_param_value("name"));
    send_html(res, r.status, r.body);
  });
  http.Get("/run", [views](const httplib::Request& req, httplib::Response& res) {
    const ViewResult r = views.run_page(req.get_param_value("id"));
    send_html(res, r.status, r.body);
  });
  http.Get("/api/study", [views](const httplib::Request& req, httplib::Response& res) {
    send_json(res, views.study_sections(req.get_param_value("name")));
  });
  http.Get("/api/run", [views](const httplib::Request& req, httplib::Response& res) {
    send_json(res, views.run_sections(req.get_param_value("id")));
  });
  http.Get("/favicon.ico", [](const httplib::Request&, httplib::Response& res) {
    res.status = 204;  // none; browsers ask for one on every page
  });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    // Unknown paths and the library's own refusals (400, 413, 414): a short page, logged. (A
    // view's own 404 page, e.g. a run number out of range, is left as it is.)
    if (!res.body.empty()) return;  // answered (and logged) already: a view's 404, a refused Host
    spdlog::warn("dashboard: {} {} -> {}", log_text(req.method), log_text(req.path), res.status);
    res.set_content(fmt::format("<!DOCTYPE html><title>{0}</title><p>{0}: {1}</p>"
                                "<p><a href=\"/\">the dashboard's index</a></p>",
                                res.status, res.status == 404 ? "no such page" : "bad request"),
                    "text/html; charset=utf-8");
  });
  http.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        spdlog::error("dashboard: {} {}: {}", log_text(req.method), log_text(req.path),
                      log_text(what, 400));
        if (req.path.rfind("/api/", 0) == 0) {
          res.status = 500;
          send_json(res, {{"error", "internal error: " + what},
                          {"sections", nlohmann::json::array()}});
          return;
        }
        send_html(res, 500, "<!DOCTYPE html><title>error</title><p>internal error: " +
                                report::escape_html(what) + "</p>");
      });
  if (!is_loopback(m.options.host))
    spdlog::warn("dashboard: binding to {}: the dashboard is reachable from other machines and "
                 "has no authentication (the default, 127.0.0.1, is not)",
                 m.options.host);
  if (m.options.port == 0) {
    m.port = http.bind_to_any_port(m.options.host);
    if (m.port <= 0)
      throw InputError(fmt::format("dashboard: cannot listen on {} (any port)", m.options.host));
  } else {
    if (!http.bind_to_port(m.options.host, m.options.port))
      throw InputError(fmt::format("dashboard: cannot listen on {}:{} (in use, or not an address "
                                   "of this machine)",
                                   m.options.host, m.options.port));
    m.port = m.options.port;
  }
  m.thread = std::thread([&http] { http.listen_after_bind(); });
  // httplib's stop() does nothing until the listening loop has started (is_running()): a stop
  // right after start() (a SIGTERM on the heels of the "serving" line) would leave the loop
  // running and join() waiting for ever. So start() returns only once the loop runs.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!http.is_running()) {
    if (std::chrono::steady_clock::now() > deadline)
      throw Error(fmt::format("dashboard: the server on port {} did not start", m.port));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void Server::stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  impl_->http.stop_serving();
  impl_->thread.join();
}

int Server::port() const { return impl_->port; }

std::string Server::url() const {
  const std::string& h = impl_->options.host;
  return fmt::format("http://{}:{}/", h.find(':') != std::string::npos ? "[" + h + "]" : h,
                     impl_->port);
}

}  // namespace ftune::dashboard
