// The MPI and NCCL gradient transports (see reduce_transport.h).
#include "dist/reduce_transport.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "core/error.h"
#include "cuda/nccl.h"

namespace ftune {
namespace {

// CPU ranks: a helper thread sums the started buckets in order with MPI_Allreduce (blocking, one
// at a time: MPI_THREAD_SERIALIZED), while the thread that started them goes on with backward.
class MpiThreadTransport : public ReduceTransport {
 public:
  explicit MpiThreadTransport(ProcessGroup& group) : group_(group) {
    worker_ = std::thread([this] { work(); });
  }
  ~MpiThreadTransport() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  void start(size_t, float* data, int64_t n) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({data, n});
    }
    cv_.notify_all();
  }

  void join() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    if (!error_.empty()) {
      std::string e;
      std::swap(e, error_);
      throw Error(e);
    }
  }

  // The helper is idle after join(): this thread's MPI call does not overlap it.
  void sum_step_loss(double* loss) override { group_.sum(loss, 1); }

  const char* name() const override { return "mpi"; }
  double busy_seconds() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return busy_seconds_;
  }

 private:
  struct Job {
    float* data;
    int64_t n;
  };

  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return quit_ || !queue_.empty(); });
      if (quit_) return;
      const Job job = queue_.front();
      busy_ = true;
      lock.unlock();
      const auto t0 = std::chrono::steady_clock::now();
      std::string error;
      try {
        group_.sum(job.data, job.n);
      } catch (const std::exception& e) {
        error = e.what();
      }
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      lock.lock();
      queue_.pop_front();
      busy_ = false;
      busy_seconds_ += secs;
      if (!error.empty() && error_.empty()) error_ = error;
      cv_.notify_all();
    }
  }

  ProcessGroup& group_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;  // started, not yet summed (the front one is being summed when busy_)
  bool busy_ = false, quit_ = false;
  std::string error_;        // the helper's failure, rethrown by join()
  double busy_seconds_ = 0;  // in MPI_Allreduce
  std::thread worker_;
};

// GPU ranks: NCCL on the communication stream behind the compute stream's events.
class NcclTransport : public ReduceTransport {
 public:
  NcclTransport(ProcessGroup& group, Device device) {
    std::string id(cuda::kNcclIdBytes, '\0');
    if (group.lead()) id = cuda::nccl_unique_id();
    group.broadcast(id.data(), static_cast<int64_t>(id.size()));
    comm_ = std::make_unique<cuda::NcclComm>(id, group.rank(), group.size(), device);
  }
  void start(size_t, float* data, int64_t n) override { comm_->sum_behind_compute(data, n); }
  void join() override { comm_->join_compute(); }
  void sum_step_loss(double* loss) override { comm_->sum(loss, 1); }  // on the compute stream
  const char* name() const override { return "nccl"; }

 private:
  std::unique_ptr<cuda::NcclComm> comm_;
};

}  // namespace

std::unique_ptr<ReduceTransport> make_reduce_transport(ProcessGroup& group, Device device) {
  if (device.is_cpu()) return std::make_unique<MpiThreadTransport>(group);
  return std::make_unique<NcclTransport>(group, device);
}

}  // namespace ftune
