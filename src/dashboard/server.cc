// The dashboard's HTTP server (server.h). cpp-httplib answers malformed requests itself (400, or
// 414 for a request line over 8 KiB), runs handlers on a thread pool, and drops a connection
// whose client went away; handlers here never throw past the library (a view that cannot be read
// is an error page or an "error" field, logged), and SIGPIPE is ignored by the command so a
// client closing mid-response cannot end the process.
#include "dashboard/server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "dashboard/live_views.h"

namespace ftune::dashboard {

struct Server::Impl {
  ServerOptions options;
  httplib::Server http;
  std::thread thread;
  int port = 0;
};

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

namespace {

constexpr size_t kMaxBody = 64 * 1024;  // the dashboard takes no uploads

void send_html(httplib::Response& res, int status, const std::string& html) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(html, "text/html; charset=utf-8");
}

void send_json(httplib::Response& res, const nlohmann::json& j) {
  res.set_header("Cache-Control", "no-store");
  res.set_content(j.dump(), "application/json");
}

}  // namespace

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
}

Server::~Server() { stop(); }

void Server::start() {
  Impl& m = *impl_;
  const Views views(m.options.storage, m.options.runs, m.options.poll_ms);
  httplib::Server& http = m.http;
  http.set_payload_max_length(kMaxBody);
  http.set_read_timeout(5, 0);
  http.set_write_timeout(5, 0);
  http.set_keep_alive_max_count(100);
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
    spdlog::warn("dashboard: {} {} -> {}", req.method, req.path.substr(0, 200), res.status);
    if (!res.body.empty()) return;
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
        spdlog::error("dashboard: {} {}: {}", req.method, req.path.substr(0, 200), what);
        send_html(res, 500, "<!DOCTYPE html><title>error</title><p>internal error: " + what + "</p>");
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
  impl_->http.stop();
  impl_->thread.join();
}

int Server::port() const { return impl_->port; }

std::string Server::url() const {
  const std::string& h = impl_->options.host;
  return fmt::format("http://{}:{}/", h.find(':') != std::string::npos ? "[" + h + "]" : h,
                     impl_->port);
}

}  // namespace ftune::dashboard
