// The ranks of a data-parallel run (issue 20): one process per rank, started by `mpirun` or
// Slurm's `srun`, which tell each process its rank, the world size and its rank on its machine
// (the local rank, which picks its GPU) through the environment. MPI (OpenMPI from Debian) is
// initialised only when a launcher started several ranks (never by a plain `ftune train`). The
// host-side collectives the run loop and the CPU gradient reduction need live here; GPUs reduce
// their gradients with NCCL (cuda/nccl.h), bootstrapped through these.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"

namespace ftune {

struct RankInfo {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;     // ranks on this machine
  bool launched = false;  // a launcher's environment was found
};

// What the launcher's environment says (OpenMPI's OMPI_COMM_WORLD_*, srun's SLURM_PROCID /
// SLURM_STEP_NUM_TASKS / SLURM_LOCALID, PMI's PMI_RANK / PMI_SIZE); one rank of one without a
// launcher.
RankInfo launcher_rank_info();

class ProcessGroup {
 public:
  // The process's world: MPI is initialised on the first call when the launcher started more
  // than one rank. Throws Error when MPI cannot start.
  static ProcessGroup& world();
  // Whether world() started MPI in this process (the error path of main: abort every rank).
  static bool started();
  // This process is no rank of a run, whatever the launcher's environment says (an `ftune hpo
  // run` worker among several that srun or mpirun started): world() is then one rank of one,
  // unlaunched. Called after world() it is a no-op where the world is one rank of one, and an
  // Error where this process is already a rank of a data-parallel run.
  static void stand_alone();

  int rank() const { return info_.rank; }
  int size() const { return info_.size; }
  int local_rank() const { return info_.local_rank; }
  int local_size() const { return info_.local_size; }
  bool distributed() const { return info_.size > 1; }
  // Started by a launcher (mpirun or srun), even as a single rank: the data-parallel step runs
  // (a GPU run of one rank exercises NCCL).
  bool launched() const { return launched_; }
  bool lead() const { return info_.rank == 0; }  // the rank that writes the run's files

  // In-place sums over the ranks (every rank gets the same bits). A rank that died makes them
  // fail: the launcher stops the job.
  void sum(float* data, int64_t n);
  void sum(double* data, int64_t n);
  void sum(int64_t* data, int64_t n);
  bool any(bool flag);  // true on every rank when it is true on one
  // Rank `root`'s bytes on every rank.
  void broadcast(void* data, int64_t bytes, int root = 0);
  void barrier();

  // Ends every rank with `code` (MPI_Abort): a rank's error stops the run everywhere.
  [[noreturn]] void abort(int code);
  // MPI_Finalize once the command is done (no-op without MPI).
  static void finalize();

 private:
  ProcessGroup(RankInfo info, bool launched);
  RankInfo info_;
  bool launched_ = false;
};

// An error every rank raises at the same point, having agreed on it (a step one rank failed:
// dist/gradient_reducer.h): the ranks end normally, without MPI_Abort.
class RanksStopped : public Error {
 public:
  using Error::Error;
};

// "rank R: " in a run the launcher started with several ranks, "" otherwise (the prefix of a
// rank's own error messages).
std::string rank_prefix();

}  // namespace ftune
