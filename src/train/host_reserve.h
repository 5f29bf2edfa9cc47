// What a CPU run needs outside its arena that the plan's margin must hold. The budget of
// `batch_size: auto` is a fraction of device_memory_info's "available", which already excludes
// what the process holds in anonymous memory at planning time (its heap, the tokenized data, the
// CUDA libraries' zero-initialised data), but:
//   - /proc/meminfo's MemAvailable counts file-backed pages as reclaimable, the process's own
//     mapped libraries included (in a CUDA build ~95 MiB of cuBLASLt and NVRTC resident on a CPU
//     run); a cgroup's memory.current already charges them;
//   - the run allocates after planning, outside the arena: per compute thread OpenBLAS's packing
//     buffers and a malloc arena, and the prefetched step batches.
// On a small machine 5% of the available memory holds neither, so the CPU budget is
// min(memory_fraction x available, available - reserve).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "core/memory.h"

namespace ftune {

// Measured on the 2-core development machine (tiny BERT and MiniLM runs, 1 and 2 threads: the
// process's anonymous memory at the end of the run less at planning, less the arena), rounded up.
constexpr size_t kHostBytesPerThread = size_t{16} << 20;
constexpr size_t kHostBytesFixed = size_t{32} << 20;

struct HostReserve {
  ProcessMemory at_plan;       // the process when the plan was made
  size_t unaccounted_rss = 0;  // the part of it `available` still counts as free
  size_t after_plan = 0;       // what the run will add outside the arena (estimate)
  size_t total() const { return unaccounted_rss + after_plan; }
  nlohmann::json to_json() const;
};

// `memory` is the CPU's device_memory_info (its source says whether file-backed pages are
// already charged); `prefetch_bytes` the step batches the prefetch thread holds at once.
HostReserve host_reserve(const DeviceMemoryInfo& memory, const ProcessMemory& process, int threads,
                         size_t prefetch_bytes);

// min(fraction x available, available - reserve): the CPU budget under memory_fraction.
size_t cpu_budget(size_t available, double fraction, size_t reserve);

}  // namespace ftune
