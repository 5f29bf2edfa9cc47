// The backend context: the run-wide choices the ops of a device follow — TF32 for the GEMMs that
// stay in fp32 (cuda/gemm.h) — set and read in one place, plus what the backend reports back
// (GEMM autotuning, its fixed workspace). train/ and cli/ go through this channel; they do not
// reach into cuda/. The attention kernel is not a process setting: it travels with each call
// (ops/attention.h), chosen by the model's plan (BackboneShape::attention).
#pragma once

#include <cstddef>
#include <string>

#include "core/device.h"

namespace ftune {

struct BackendContext {
  bool tf32 = false;  // TF32 tensor cores for fp32 GEMMs (a GPU setting; the CPU has none)
};

// Sets the context of the process's runs on `device` (the CPU ignores TF32).
void set_backend_context(Device device, const BackendContext& context);
// The context in force.
BackendContext backend_context();

// The GEMM algorithm autotuning of this process, one line ("" without CUDA).
std::string gemm_autotune_report();
// Writes the algorithms timed since the last save to the shared cache file (cuda/gemm.h; the
// trainer calls it after the first step and at the end of a run). Nothing without CUDA.
void gemm_autotune_save();
// Bytes the GEMM library holds outside the arena on `device` (cuBLASLt's workspace; 0 on the
// CPU).
size_t gemm_workspace_bytes(Device device);

}  // namespace ftune
