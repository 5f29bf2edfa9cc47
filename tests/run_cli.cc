// Shell runner for CLI tests.
#include "run_cli.h"

#include <sys/wait.h>

#include <cstdio>

#include "test_util.h"

namespace ftune::test {

CliResult run_ftune(const std::string& args, const std::string& env) {
  CliResult r;
  const std::string cmd = (env.empty() ? "" : env + " ") + ftune_binary() + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace ftune::test
