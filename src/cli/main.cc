// Entry point of the `ftune` command (cli/run.h: the verbs and their exit statuses).
#include "cli/run.h"
#include "core/blas_buffers.h"

int main(int argc, char** argv) {
  ftune::reexec_with_blas_settings(argv);  // OpenBLAS threads and kernels (blas_buffers.h)
  return ftune::cli::run(argc, argv);
}
