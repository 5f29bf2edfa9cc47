// Prefetching of padded batches: a producer thread assembles the batches of global steps
// [start, end) in order (the trainer's: one per optimizer step, which it cuts into micro-batches)
// into a bounded queue while the consumer trains on the previous one, so padding and copying
// overlap the step. next() reports how long the consumer waited (the "time
// waiting for input" of the run report). Destruction or stop() ends the producer at any point
// without deadlock; an exception thrown while making a batch is rethrown by next() once the
// batches made before it have been handed out.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "data/batcher.h"
#include "data/batch.h"

namespace ftune::data {

class BatchPrefetcher {
 public:
  // Makes the batch of one global step; called on the producer thread, steps in order.
  using MakeBatch = std::function<Batch(int64_t step)>;

  // Starts producing make(start), make(start + 1), ..., make(end - 1), at most `depth` ahead.
  BatchPrefetcher(MakeBatch make, int64_t start, int64_t end, int64_t depth = 4);
  ~BatchPrefetcher();  // stop()
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // The training batches: make_batch(*examples, batcher.batch(step), pad_id). The batcher is
  // copied (the producer owns its epoch cache); `examples` must outlive the prefetcher.
  static MakeBatch training_batches(const LengthBucketedBatcher& batcher,
                                    const std::vector<TokenizedExample>* examples, int32_t pad_id);

  bool done() const { return next_step_ >= end_; }
  int64_t next_step() const { return next_step_; }
  // The batch of next_step(); blocks until it is ready. Rethrows the producer's exception.
  // Calling it when done() is a bug (FTUNE_ASSERT).
  Batch next();
  // Seconds next() spent blocked so far.
  double wait_seconds() const { return wait_seconds_; }
  // Ends the producer (early stop); batches not taken are dropped. Idempotent.
  void stop();

 private:
  void produce();

  MakeBatch make_;
  const int64_t end_;
  const size_t depth_;
  int64_t next_step_;
  double wait_seconds_ = 0;

  std::mutex mu_;
  std::condition_variable ready_cv_, space_cv_;
  std::deque<Batch> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  int64_t start_;
  std::thread producer_;
};

}  // namespace ftune::data
