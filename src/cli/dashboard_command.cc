// `ftune dashboard [--storage URL] [--runs DIR ...] [--port N] [--host ADDRESS]`: serves the study
// and run views (dashboard/server.h) until SIGINT or SIGTERM. Binds to 127.0.0.1 by default; any
// other address is the user's explicit choice and is warned about in the log.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "dashboard/server.h"

namespace ftune::cli {
namespace {

void run_dashboard(const dashboard::ServerOptions& options) {
  if (options.storage.empty() && options.runs.empty())
    throw InputError("ftune dashboard: give --storage URL, --runs DIR ..., or both");
  if (options.port < 0 || options.port > 65535)
    throw InputError("ftune dashboard: --port must be between 0 and 65535");
  if (options.poll_ms < 100)
    throw InputError("ftune dashboard: --poll-ms must be at least 100");
  // A client that closes its connection mid-response must not end the process.
  std::signal(SIGPIPE, SIG_IGN);
  // SIGINT / SIGTERM are taken by sigwait below, not by whichever thread they would hit.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  dashboard::Server server(options);
  server.start();
  spdlog::info("dashboard: serving on {} (Ctrl-C stops it)", server.url());
  int signal = 0;
  sigwait(&stop_signals, &signal);
  spdlog::info("dashboard: signal {} received, stopping", signal);
  server.stop();
}

}  // namespace

void add_dashboard_command(CLI::App& app) {
  auto options = std::make_shared<dashboard::ServerOptions>();
  CLI::App* cmd = app.add_subcommand(
      "dashboard", "Serve live study and run views over HTTP (read-only; localhost by default)");
  cmd->add_option("--storage", options->storage,
                  "Study storage: sqlite:///study.db, a .db path or postgresql://...");
  cmd->add_option("--runs", options->runs, "Run directories (output.dir of `ftune train`)");
  cmd->add_option("--port", options->port, "Port (0: any free port; default 8080)");
  cmd->add_option("--host", options->host,
                  "Address to bind (default 127.0.0.1; others are reachable from other machines)");
  cmd->add_option("--poll-ms", options->poll_ms,
                  "How often the pages refresh their views, in milliseconds (default 2000)");
  cmd->callback([options] { run_dashboard(*options); });
}

}  // namespace ftune::cli
