// `ftune <verb> ...`: runs the command line and returns the process's exit status (cli/run.cc).
#pragma once

namespace ftune::cli {

int run(int argc, char** argv);

}  // namespace ftune::cli
