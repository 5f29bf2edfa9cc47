// The CPU run's memory outside its arena (see host_reserve.h).
#include "train/host_reserve.h"

#include <algorithm>

namespace ftune {

nlohmann::json HostReserve::to_json() const {
  return {{"rss_at_plan_bytes", at_plan.rss},
          {"rss_file_at_plan_bytes", at_plan.rss_file},
          {"unaccounted_rss_bytes", unaccounted_rss},
          {"after_plan_bytes", after_plan},
          {"reserve_bytes", total()}};
}

HostReserve host_reserve(const DeviceMemoryInfo& memory, const ProcessMemory& process, int threads,
                         size_t prefetch_bytes) {
  HostReserve r;
  r.at_plan = process;
  // An artificial limit (tests) bounds the arena's allocations only: nothing else to hold.
  if (memory.source != "/proc/meminfo" && memory.source != "cgroup memory.max") return r;
  // A cgroup charges the mapped files to memory.current already; MemAvailable does not.
  r.unaccounted_rss = memory.source == "/proc/meminfo" ? process.rss_file : 0;
  r.after_plan = kHostBytesFixed + kHostBytesPerThread * static_cast<size_t>(std::max(threads, 1)) +
                 prefetch_bytes;
  return r;
}

size_t cpu_budget(size_t available, double fraction, size_t reserve) {
  const size_t by_fraction = static_cast<size_t>(static_cast<double>(available) * fraction);
  return std::min(by_fraction, available > reserve ? available - reserve : 0);
}

}  // namespace ftune
