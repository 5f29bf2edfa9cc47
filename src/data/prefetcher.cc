// Producer thread and bounded queue of the batch prefetcher (see prefetcher.h).
#include "data/prefetcher.h"

#include <chrono>

#include "core/error.h"

namespace ftune::data {

BatchPrefetcher::BatchPrefetcher(MakeBatch make, int64_t start, int64_t end, int64_t depth)
    : make_(std::move(make)),
      end_(end),
      depth_(static_cast<size_t>(depth)),
      next_step_(start),
      start_(start) {
  FTUNE_ASSERT(depth >= 1 && start >= 0 && start <= end, "prefetch [{}, {}) depth {}", start, end,
               depth);
  producer_ = std::thread([this] { produce(); });
}

BatchPrefetcher::~BatchPrefetcher() {
  stop();
}

BatchPrefetcher::MakeBatch BatchPrefetcher::training_batches(
    const LengthBucketedBatcher& batcher, const std::vector<TokenizedExample>* examples,
    int32_t pad_id) {
  return [b = LengthBucketedBatcher(batcher), examples, pad_id](int64_t step) mutable {
    return make_batch(*examples, b.batch(step), pad_id);
  };
}

void BatchPrefetcher::produce() {
  for (int64_t step = start_; step < end_; ++step) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      space_cv_.wait(lock, [&] { return stop_ || queue_.size() < depth_; });
      if (stop_) return;
    }
    Batch b;
    try {
      b = make_(step);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      ready_cv_.notify_one();
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(b));
    ready_cv_.notify_one();
  }
}

Batch BatchPrefetcher::next() {
  FTUNE_ASSERT(!done(), "next() after the last step {}", end_ - 1);
  std::unique_lock<std::mutex> lock(mu_);
  if (queue_.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    ready_cv_.wait(lock, [&] { return !queue_.empty() || error_ || stop_; });
    wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (queue_.empty()) {
    if (error_) std::rethrow_exception(error_);
    throw InternalError("BatchPrefetcher::next() after stop()");
  }
  Batch b = std::move(queue_.front());
  queue_.pop_front();
  ++next_step_;
  space_cv_.notify_one();
  return b;
}

void BatchPrefetcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    queue_.clear();
  }
  space_cv_.notify_all();
  ready_cv_.notify_all();
  if (producer_.joinable()) producer_.join();
}

}  // namespace ftune::data
