// Signal handlers for graceful stop (see stop_signal.h).
#include "train/stop_signal.h"

#include <atomic>
#include <csignal>

namespace ftune {
namespace {

std::atomic<int> g_signal{0};
struct sigaction g_old_term, g_old_int;

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  g_signal.compare_exchange_strong(expected, sig);
}

}  // namespace

StopSignal::StopSignal() {
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGINT, &sa, &g_old_int);
}

StopSignal::~StopSignal() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
}

bool StopSignal::requested() const {
  return g_signal.load() != 0;
}
int StopSignal::signal() const {
  return g_signal.load();
}

}  // namespace ftune
