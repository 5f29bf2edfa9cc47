// Data-parallel steps (issue 20): which rows of the global step batch this rank computes, and the
// sum over the ranks of what they computed. Every rank receives the same global step batch (rows
// ordered by length) and computes one contiguous row range of it (whole query groups when the
// loss is over groups: listwise, margin_mse), with each micro-batch's loss
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
// each finished layer (models/gradient_ready.h); a bucket whose layers are all finished starts its
// sum over the ranks while backward goes on with the layers below. The rest (non-layer parameters,
// and everything of a rank that had no rows) follows once backward returns. Every rank starts the
// buckets in the same order (by the lowest layer they hold, then from the buffer's end), as MPI's
// collectives require.
//
// The same schedule drives both transports (dist/reduce_transport.h): on CPUs a helper thread
// sums each started bucket with MPI_Allreduce; on GPUs NCCL sums it on a communication stream
// behind an event recorded on the compute stream when the layer's backward was queued, and the
// optimizer's stream waits for the communication stream. With CUDA graphs replaying the
// micro-batches the host sees no layer finish: the buckets then start once backward is queued.
//
// A rank's step that fails (out of memory, or any other error in its forward and backward) still
// starts every bucket, so the ranks' collectives stay paired; the ranks then agree on the step
// (one small sum each step): when every failure is an out-of-memory and every rank can halve its
// micro-batch, every rank raises OutOfMemoryError and falls back together (same effective batch,
// same trajectory); otherwise every rank stops with an error naming the failing rank and its cause.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "dist/process_group.h"
#include "dist/reduce_transport.h"
#include "models/gradient_ready.h"
#include "models/param_table.h"

namespace ftune {

// Rank `rank` of `size`: rows [rows * rank / size, rows * (rank + 1) / size) of a step batch of
// `rows` (contiguous; ranks differ by at most one row; a rank may get none of a tiny last batch).
// group_size > 1 (listwise, margin_mse: the step batch is consecutive query groups of that many
// rows): the same cut over groups, so a rank gets whole groups, never part of one — groups
// [G * rank / size, G * (rank + 1) / size) of the G = rows / group_size, as rows.
std::pair<int64_t, int64_t> rank_rows(int64_t rows, int rank, int size, int64_t group_size = 1);

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

// The end of the run of buckets final once backward has finished `layer` (buckets [0, end) of
// the plan's order may have started): the schedule both transports follow.
size_t buckets_final_after(const std::vector<ReduceBucket>& buckets, size_t started, int64_t layer);

// What went wrong in this rank's part of a step.
struct RankFailure {
  enum Kind : int64_t { kNone = 0, kOutOfMemory = 1, kError = 2 };
  Kind kind = kNone;
  std::string what;
};

// The ranks' verdict on a step from each rank's failure kind and whether it can halve its
// micro-batch: none failed; every rank falls back (all failures out-of-memory, all can halve);
// or every rank stops. `first` is the lowest failing rank (-1 when none); `out_of_memory`:
// every failure was one.
struct StepVerdict {
  enum Kind { kOk, kFallBack, kStop } kind = kOk;
  int first = -1;
  bool out_of_memory = false;
};
StepVerdict judge_step(const std::vector<int64_t>& kinds, int64_t ranks_that_cannot_halve);

class GradientReducer : public GradientReadyListener {
 public:
  // `bucket_mb`: training.reduce_bucket_mb; the transport of `device` (make_reduce_transport).
  GradientReducer(ProcessGroup& group, Device device, double bucket_mb);
  // With a transport of the caller's (tests record what is started, and when).
  GradientReducer(ProcessGroup& group, std::unique_ptr<ReduceTransport> transport,
                  double bucket_mb);
  ~GradientReducer() override;
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // This rank's rows of a step batch (whole groups of `group_size` rows: rank_rows).
  std::pair<int64_t, int64_t> rows(int64_t step_rows, int64_t group_size = 1) const {
    return rank_rows(step_rows, group_.rank(), group_.size(), group_size);
  }
  // The most rows any rank computes of a step batch of `step_rows` (whole groups of `group_size`).
  int64_t most_rows(int64_t step_rows, int64_t group_size = 1) const {
    const int64_t units = step_rows / group_size;
    return (units + group_.size() - 1) / group_.size() * group_size;
  }

  // The buckets over the trainable parameters and their gradient buffer (f32); again whenever
  // the buffer moves (an arena rebuilt smaller).
  void plan(const ParamTable& params, TensorView grads);
  const std::vector<ReduceBucket>& buckets() const { return buckets_; }
  // Before the step's last backward: its finished layers start their buckets.
  void arm();
  void layer_done(int64_t layer) override;
  // After the step's last backward (or this rank's failure in the step, `failure`): the
  // remaining buckets, every sum complete, then the ranks' verdict on the step (throws as the
  // header says when a rank failed; `can_halve`: this rank's micro-batch can halve), then
  // `step_loss` (the step scalars' kStepLoss slot, on the device) summed.
  void finish(double* step_loss, const RankFailure& failure = {}, bool can_halve = false);

  // summary.json "data_parallel": ranks, transport, buckets, bytes reduced per step, buckets
  // started during backward, seconds spent reducing and waiting for it after backward, and the
  // fraction of the reduction hidden behind backward (MPI; NCCL's is on the device's timeline).
  nlohmann::json report() const;
  // The ranks' total of `n` counts (the run's FLOPs and tokens over every rank).
  void sum(double* data, int64_t n) { group_.sum(data, n); }
  int ranks() const { return group_.size(); }

 private:
  void start_upto(size_t upto);  // buckets [started_, upto) to the transport
  void agree(const RankFailure& failure, bool can_halve);

  ProcessGroup& group_;
  std::unique_ptr<ReduceTransport> transport_;
  int64_t bucket_elements_;
  std::vector<ReduceBucket> buckets_;
  float* grads_ = nullptr;
  size_t started_ = 0;  // buckets started this step
  bool armed_ = false;  // within the step's last backward

  int64_t steps_ = 0;
  int64_t started_in_backward_ = 0;  // buckets started by a layer's finish, over the run
  double wait_seconds_ = 0;          // the host's wait in finish(): the reduction not hidden (MPI)
};

}  // namespace ftune
