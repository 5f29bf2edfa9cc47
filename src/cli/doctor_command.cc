// `ftune doctor`: what this build and machine can do — backends compiled in, devices present,
// compute threads, BLAS — so a user can see why an optimisation is on or off.
#include <fmt/format.h>

#include "cli/commands.h"
#include "core/device.h"
#include "core/float_env.h"
#include "core/thread_pool.h"

#ifdef FTUNE_WITH_CUDA
#include "cuda/cuda_device.h"
#endif

extern "C" char* openblas_get_config();

namespace ftune::cli {

void add_doctor_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("doctor", "Print the devices and capabilities ftune sees");
  cmd->callback([] {
    fmt::print("ftune 0.1.0\n");
    fmt::print("cpu: {} compute threads, flush-to-zero {}\n", compute_threads(),
               flush_to_zero_enabled() ? "on" : "off");
    fmt::print("blas: {}\n", openblas_get_config());
    fmt::print("cuda backend: {}\n", cuda_built() ? "built" : "not built (FTUNE_CUDA=OFF)");
#ifdef FTUNE_WITH_CUDA
    const int n = cuda_device_count();
    if (n == 0) fmt::print("cuda devices: none visible\n");
    for (int i = 0; i < n; ++i)
      fmt::print("cuda:{}: {}\n", i, cuda::device_description(Device::cuda(i)));
#endif
  });
}

}  // namespace ftune::cli
