// How a data-parallel run moves its gradient buckets between the ranks (issue 20; the buckets and
// when each may start are dist/gradient_reducer.h's, the same for every transport). Two
// transports: on CPUs a helper thread sums the buckets one after another with MPI_Allreduce while
// backward goes on; on GPUs NCCL sums each bucket on a communication stream of its own, after an
// event recorded on the compute stream when the bucket was started (the backward kernels queued so
// far, which made its gradients final), and join() makes the compute stream (the optimizer) wait
// for the communication stream: no host synchronisation. Tests substitute a recording transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"
#include "dist/process_group.h"

namespace ftune {

class ReduceTransport {
 public:
  virtual ~ReduceTransport() = default;
  // Starts summing bucket `index` (n floats at `data`) over the ranks, in place. Called in bucket
  // order, the same on every rank, from the thread running backward, as soon as the bucket's
  // gradients are final (for a GPU: final once what is queued on the compute stream has run).
  virtual void start(size_t index, float* data, int64_t n) = 0;
  // Every started sum is complete before what follows: the host waits (MPI), or the compute
  // stream does (NCCL). Rethrows a failed sum.
  virtual void join() = 0;
  // The step's loss (one double; device memory on a GPU), summed after join().
  virtual void sum_step_loss(double* loss) = 0;
  // "mpi" or "nccl" (summary.json data_parallel.reduction).
  virtual const char* name() const = 0;
  // Seconds spent summing buckets so far, measured where the sums run (the MPI helper thread);
  // negative where the host does not see them (NCCL's stream).
  virtual double busy_seconds() const { return -1; }
};

// The transport of a rank on `device`: MPI on the CPU, NCCL on a GPU (its communicator made
// collectively: every rank calls this at the same time).
std::unique_ptr<ReduceTransport> make_reduce_transport(ProcessGroup& group, Device device);

}  // namespace ftune
