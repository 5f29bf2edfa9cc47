// Entry point of the `ftune` command (cli/run.h: the verbs and their exit statuses).
#include "cli/run.h"

int main(int argc, char** argv) { return ftune::cli::run(argc, argv); }
