// Helpers of the `ftune hpo` end-to-end tests (see hpo_cli_util.h).
#include "hpo_cli_util.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "io/atomic_file.h"

namespace ftune::hpo {

// Polls every 20 ms until `path` exists; false after 30 s.
bool wait_for_file(const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(30)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

void write_objective(const std::string& dir) {
  const std::string script = R"SH(#!/bin/sh
for a in "$@"; do case $a in --x=*) x=${a#--x=};; --y=*) y=${a#--y=};; esac; done
case "$MODE" in
  slow) sleep 0.05 ;;
  args) echo "$@" >> "$DIR/args" ;;
  fail) echo "bad things" >&2; exit 3 ;;
  prune) i=0; while [ $i -lt 30 ]; do echo "intermediate $i $x"; i=$((i+1)); sleep 0.01; done ;;
  heavy) i=0; while [ $i -lt 300 ]; do echo "intermediate $i $x"; i=$((i+1)); done ;;
  killme) if mkdir "$DIR/marker" 2>/dev/null; then echo $$ > "$DIR/marker/pid"; echo "$FTUNE_TRIAL_NUMBER" > "$DIR/marker/n"; while :; do echo tick; sleep 0.1; done; fi ;;
  stall) if mkdir "$DIR/marker" 2>/dev/null; then echo "$FTUNE_TRIAL_NUMBER" > "$DIR/marker/n"; while [ ! -e "$DIR/go" ]; do sleep 0.05; done; echo "value 7"; exit 0; fi ;;
  hang) sleep 1000 & echo $! > "$DIR/child.tmp"; mv "$DIR/child.tmp" "$DIR/child.pid"; echo "intermediate 0 $x"; wait ;;
  stubborn) trap '' TERM; sleep 1000 & echo $! > "$DIR/child.tmp"; mv "$DIR/child.tmp" "$DIR/child.pid"; echo "intermediate 0 $x"; while :; do sleep 0.1; done ;;
esac
echo "some log line"
echo "intermediate 0 $x"
echo "fold 0 $x"
echo "fold 1 $y"
echo "value $(awk "BEGIN{print ($x)*($x) + $y}")"
)SH";
  io::write_file_atomic(dir + "/objective.sh", script);
  std::filesystem::permissions(dir + "/objective.sh", std::filesystem::perms::owner_all);
}

std::string write_config(const std::string& dir, const std::string& storage,
                         const std::string& mode, const std::string& extra, const std::string& grace_s) {
  const std::string yaml =
      "study: {name: demo, direction: minimize, metric: loss}\n"
      "storage: " +
      storage +
      "\n"
      "sampler: {type: random}\n"
      "pruner: {type: none}\n"
      "space:\n"
      "  x: {type: float, low: -3, high: 3}\n"
      "  y: {type: int, low: 0, high: 4}\n"
      "objective: {command: \"MODE=" +
      mode + " DIR=" + dir + " " + dir +
      "/objective.sh\"}\n"
      "heartbeat_s: 0.2\n"
      "grace_s: " +
      grace_s +
      "\n"
      "retries: 1\n" +
      extra;
  io::write_file_atomic(dir + "/search.yaml", yaml);
  return dir + "/search.yaml";
}

// True when `pid` no longer runs (gone, or a zombie nobody reaped yet).
bool process_gone(int pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

}  // namespace ftune::hpo
