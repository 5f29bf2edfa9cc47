// The ranks of a data-parallel run over MPI (see process_group.h).
#include "dist/process_group.h"

#include <fmt/format.h>
// MPI's C API only (OpenMPI's header would bring its deprecated C++ bindings along).
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>

#include "core/error.h"

namespace ftune {
namespace {

// The first of `names` that is set, as an int; nullopt when none is.
std::optional<int> env_int(std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (const char* v = std::getenv(name); v && *v) {
      char* end = nullptr;
      const long x = std::strtol(v, &end, 10);
      if (*end != '\0' || x < 0)
        throw InputError(fmt::format("environment variable {}='{}': expected a rank count or "
                                     "index (a non-negative integer)",
                                     name, v));
      return static_cast<int>(x);
    }
  return std::nullopt;
}

std::unique_ptr<ProcessGroup>& world_slot() {
  static std::unique_ptr<ProcessGroup> w;
  return w;
}
bool mpi_started = false;
bool standalone = false;  // stand_alone() was called

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(fmt::format("{}{} failed: {}", rank_prefix(), what, std::string(text, len)));
}

}  // namespace

RankInfo launcher_rank_info() {
  RankInfo r;
  const std::optional<int> size = env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"});
  r.launched = size.has_value();
  r.size = size.value_or(1);
  r.rank = env_int({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}).value_or(0);
  r.local_rank = env_int({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
                     .value_or(r.size > 1 ? -1 : 0);
  if (r.size < 1 || r.rank >= r.size)
    throw InputError(fmt::format("the launcher's environment gives rank {} of {} ranks", r.rank,
                                 r.size));
  return r;
}

ProcessGroup::ProcessGroup(RankInfo info, bool launched) : info_(info), launched_(launched) {}

ProcessGroup& ProcessGroup::world() {
  static std::once_flag once;
  std::call_once(once, [] {
    RankInfo info = standalone ? RankInfo{} : launcher_rank_info();
    if (info.size > 1) {  // one rank needs no MPI (`mpirun -np 1` runs programs that never init)
      int provided = 0;
      // Collectives are called from one thread at a time (the step's, or its reduction helper).
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        throw Error("MPI_Init_thread failed: cannot join the ranks of this run");
      mpi_started = true;
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      int rank = 0, size = 1;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      if (rank != info.rank || size != info.size)
        throw Error(fmt::format("MPI says rank {} of {}; the launcher's environment said {} of {}",
                                rank, size, info.rank, info.size));
      // The ranks sharing this machine's memory (srun's environment need not say).
      MPI_Comm node;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
      int local = 0, local_size = 1;
      MPI_Comm_rank(node, &local);
      MPI_Comm_size(node, &local_size);
      MPI_Comm_free(&node);
      if (info.local_rank < 0) info.local_rank = local;
      info.local_size = local_size;
    }
    world_slot().reset(new ProcessGroup(info, info.launched));
  });
  if (!world_slot()) throw Error("the process group failed to start earlier in this process");
  return *world_slot();
}

bool ProcessGroup::started() { return mpi_started; }

void ProcessGroup::stand_alone() {
  if (world_slot()) {  // started before (a Python process that trained earlier)
    if (world_slot()->distributed())
      throw Error(fmt::format("this process is rank {} of a {}-rank run already; it cannot also "
                              "stand alone as a search worker",
                              world_slot()->rank(), world_slot()->size()));
    return;  // one rank of one already
  }
  standalone = true;
}

void ProcessGroup::sum(float* data, int64_t n) {
  if (!distributed() || n == 0) return;
  check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
        "MPI_Allreduce");
}

void ProcessGroup::sum(double* data, int64_t n) {
  if (!distributed() || n == 0) return;
  check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_DOUBLE, MPI_SUM,
                      MPI_COMM_WORLD),
        "MPI_Allreduce");
}

void ProcessGroup::sum(int64_t* data, int64_t n) {
  if (!distributed() || n == 0) return;
  check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_INT64_T, MPI_SUM,
                      MPI_COMM_WORLD),
        "MPI_Allreduce");
}

bool ProcessGroup::any(bool flag) {
  int64_t x = flag ? 1 : 0;
  sum(&x, 1);
  return x != 0;
}

void ProcessGroup::broadcast(void* data, int64_t bytes, int root) {
  if (!distributed() || bytes == 0) return;
  check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
}

void ProcessGroup::barrier() {
  if (distributed()) check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

void ProcessGroup::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void ProcessGroup::finalize() {
  if (!mpi_started) return;
  int done = 0;
  MPI_Finalized(&done);
  if (!done) MPI_Finalize();
}

std::string rank_prefix() {
  // From the environment, so that a rank failing before MPI started is named too.
  static const RankInfo info = [] {
    try {
      return launcher_rank_info();
    } catch (const Error&) {
      return RankInfo{};
    }
  }();
  return info.size > 1 ? fmt::format("rank {}: ", info.rank) : std::string();
}

}  // namespace ftune
