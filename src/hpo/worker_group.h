// Several search workers on one device (`trials_per_device: K` in the search file): `ftune hpo
// run` starts K copies of itself as worker processes and only supervises them. Each copy is an
// ordinary worker of the study (the storage hands out the trials), told its slot by
// FTUNE_HPO_WORKER_SLOT=i/K. On the CPU worker i is pinned (sched_setaffinity, inherited by every
// thread it starts) to its own share of the cores this process may use, so K small trials train
// side by side on core subsets instead of one trial on all cores; on a GPU the K workers share the
// device, each planning with 1/K of its memory (the caller sets that from the slot).
//
// The workers run in a process group of their own: Ctrl-C or SIGTERM to the supervisor is passed
// on to them once (each then fails its trial in flight as "interrupted", as a single worker does),
// and a supervisor killed with -9 takes them along (PR_SET_PDEATHSIG).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ftune::hpo {

struct WorkerSlot {
  int index = 0;  // 0 .. count-1
  int count = 1;
};

// This process's slot when a supervisor started it (FTUNE_HPO_WORKER_SLOT), else nullopt.
// Error when the variable is malformed.
std::optional<WorkerSlot> worker_slot_from_env();

// The cores of worker `slot` out of `allowed` (the CPUs this process may run on, in order):
// contiguous shares as equal as they can be; with fewer cores than workers each gets one core,
// taken round-robin.
std::vector<int> worker_cores(const std::vector<int>& allowed, WorkerSlot slot);

// The CPUs this process may run on (sched_getaffinity), ascending.
std::vector<int> allowed_cpus();

// Starts `count` copies of this executable with `argv` (argv[0] included), each with
// FTUNE_HPO_WORKER_SLOT set and, when `pin_cores`, pinned to worker_cores(); waits for all of
// them and returns the exit code to end with: 0 when every one exited 0, else the first non-zero
// code in slot order (128 + the signal for one killed by a signal).
int run_worker_group(const std::vector<std::string>& argv, int count, bool pin_cores);

}  // namespace ftune::hpo
