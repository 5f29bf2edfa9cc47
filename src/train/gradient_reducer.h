// Data-parallel steps (issue 20): which rows of the global step batch this rank computes, and the
// sum over the ranks of what they computed. Every rank receives the same global step batch (rows
// ordered by length) and computes one contiguous row range of it, with each micro-batch's loss
// share taken over the global batch's loss denominator and dropout keyed by a row's place in the
// global batch (train/single_device_step.cc), so that the sum over ranks of their gradients and
// step losses is the single process's, up to float summation order. The sum is complete before
// the optimizer tail: the gradient norm, the clip coefficient and the non-finite check are then
// computed from the same summed gradients and loss on every rank, so every replica takes the same
// step (or skips it) and the replicas stay equal.
//
// Overlap with backward: the flat gradient buffer is cut into buckets of contiguous parameter
// ranges (about training.reduce_bucket_mb each, never mixing a layer's parameters with the
// embeddings', head's or other non-layer ones). During the step's last backward the family reports
// each finished layer (models/gradient_ready.h); a bucket whose layers are all finished is handed
// to a helper thread that sums it over the ranks (MPI_Allreduce) while backward goes on with the
// layers below. The rest (non-layer parameters, and everything of a rank that had no rows) follows
// once backward returns. Every rank starts the buckets in the same order (by the lowest layer they
// hold, then from the buffer's end), as MPI's collectives require.
//
// On GPUs the sums are NCCL's (cuda/nccl.h), queued on the compute stream after the last backward
// (stream-ordered, no host wait; one call over the whole buffer, not yet overlapped with backward).
#pragma once

#include <condition_variable>
#include <memory>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "cuda/nccl.h"
#include "models/gradient_ready.h"
#include "models/param_table.h"
#include "train/process_group.h"

namespace ftune {

// Rank `rank` of `size`: rows [rows * rank / size, rows * (rank + 1) / size) of a step batch of
// `rows` (contiguous; ranks differ by at most one row; a rank may get none of a tiny last batch).
std::pair<int64_t, int64_t> rank_rows(int64_t rows, int rank, int size);

// The layer a parameter belongs to from its Hugging Face name ("...layer.3..." or
// "...layers.3..."), or -1 (embeddings, norms outside layers, pooler, head, shared tables).
int64_t param_layer(const std::string& name);

// A bucket: elements [begin, end) of the flat gradient buffer; final once backward has finished
// layer `stage` (-1: only once backward has returned).
struct ReduceBucket {
  int64_t begin = 0, end = 0, stage = -1;
};
// The buckets of a parameter table, in the order every rank starts them: cut from the buffer's
// end, at most `max_elements` each (a larger parameter alone), layer and non-layer parameters
// apart.
std::vector<ReduceBucket> plan_buckets(const ParamTable& params, int64_t max_elements);

class GradientReducer : public GradientReadyListener {
 public:
  // `bucket_mb`: training.reduce_bucket_mb.
  GradientReducer(ProcessGroup& group, Device device, double bucket_mb);
  ~GradientReducer() override;
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  std::pair<int64_t, int64_t> rows(int64_t step_rows) const {
    return rank_rows(step_rows, group_.rank(), group_.size());
  }
  // The most rows any rank computes of a step batch of `step_rows`.
  int64_t most_rows(int64_t step_rows) const {
    return (step_rows + group_.size() - 1) / group_.size();
  }

  // The buckets over the trainable parameters and their gradient buffer (f32); again whenever
  // the buffer moves (an arena rebuilt smaller).
  void plan(const ParamTable& params, TensorView grads);
  // Before the step's last backward: its finished layers start their buckets.
  void arm();
  void layer_done(int64_t layer) override;
  // After the step's last backward: the remaining buckets, the wait for all of them, then the
  // step's loss (the kStepLoss slot of the step scalars) summed too.
  void finish(TensorView scalars);

  // summary.json "data_parallel": ranks, buckets, bytes reduced per step, seconds spent reducing
  // and waiting for it after backward, and the fraction of the reduction hidden behind backward.
  nlohmann::json report() const;

 private:
  void hand_over(size_t upto);  // buckets [0, upto) to the helper thread
  void work();                  // the helper thread: sums the handed buckets in order

  ProcessGroup& group_;
  Device device_;
  int64_t bucket_elements_;
  std::vector<ReduceBucket> buckets_;
  float* grads_ = nullptr;
  size_t started_ = 0;  // buckets handed over this step (main thread)

  std::mutex mu_;
  std::condition_variable cv_;
  size_t queued_ = 0, done_ = 0;  // under mu_
  bool quit_ = false;
  std::string error_;            // the helper's failure, rethrown by finish()
  double busy_seconds_ = 0;      // the helper's time in MPI_Allreduce (under mu_)
  std::thread worker_;                     // CPU ranks
  std::unique_ptr<cuda::NcclComm> nccl_;  // GPU ranks

  int64_t steps_ = 0;
  double wait_seconds_ = 0;  // the main thread's wait in finish(): the reduction not hidden
};

}  // namespace ftune
