// summary.json "gpu_paths": which GPU code paths a run took (core/gpu_paths.h), grouped for a
// reader: GEMMs (fused epilogue, plain, unfused epilogue, naive), attention passes (cuDNN, ftune's
// kernel, and how many of those cuDNN refused), cuDNN plan builds with their time and refusals,
// CUDA graph captures with their time and replays, and whether everything that ran is
// deterministic. All zero on the CPU.
#pragma once

#include <nlohmann/json.hpp>

#include "core/gpu_paths.h"

namespace ftune {

nlohmann::json gpu_paths_json(const GpuPathCounts& counts);

}  // namespace ftune
