// Data-parallel gradient reduction (see gradient_reducer.h).
#include "train/gradient_reducer.h"

#include <algorithm>
#include <chrono>
#include <regex>

#include "core/error.h"
#include "train/step_scalars.h"

namespace ftune {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

std::pair<int64_t, int64_t> rank_rows(int64_t rows, int rank, int size) {
  return {rows * rank / size, rows * (rank + 1) / size};
}

int64_t param_layer(const std::string& name) {
  static const std::regex layer(R"((^|\.)layers?\.(\d+)\.)");
  std::smatch m;
  return std::regex_search(name, m, layer) ? std::stoll(m[2].str()) : -1;
}

std::vector<ReduceBucket> plan_buckets(const ParamTable& params, int64_t max_elements) {
  std::vector<ReduceBucket> out;
  const std::vector<ParamSpec>& specs = params.specs();
  int64_t covered_to = params.total();  // everything at or above it is in a bucket
  const auto close_gap = [&](int64_t below) {  // elements no parameter names: reduced last
    if (below < covered_to) out.push_back({below, covered_to, -1});
    covered_to = below;
  };
  for (auto it = specs.rbegin(); it != specs.rend(); ++it) {
    const int64_t begin = it->offset, end = it->offset + it->shape.numel();
    const int64_t stage = param_layer(it->name);
    ReduceBucket* b = out.empty() ? nullptr : &out.back();
    const bool joins = b && end == b->begin && end == covered_to && (b->stage >= 0) == (stage >= 0) &&
                       b->end - begin <= max_elements;
    if (joins) {
      b->begin = begin;
      b->stage = std::min(b->stage, stage);
    } else {
      close_gap(end);
      out.push_back({begin, end, stage});
    }
    covered_to = begin;
  }
  close_gap(0);
  // Started as backward finishes them: higher layers first, non-layer buckets last; from the
  // buffer's end within a stage.
  std::stable_sort(out.begin(), out.end(),
                   [](const ReduceBucket& a, const ReduceBucket& b) { return a.stage > b.stage; });
  return out;
}

GradientReducer::GradientReducer(ProcessGroup& group, Device device, double bucket_mb)
    : group_(group),
      device_(device),
      bucket_elements_(std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1024 * 1024 / 4))) {
  if (device.is_cpu()) {
    worker_ = std::thread([this] { work(); });
    return;
  }
  std::string id(cuda::kNcclIdBytes, '\0');
  if (group.lead()) id = cuda::nccl_unique_id();
  group.broadcast(id.data(), static_cast<int64_t>(id.size()));
  nccl_ = std::make_unique<cuda::NcclComm>(id, group.rank(), group.size(), device);
}

GradientReducer::~GradientReducer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void GradientReducer::plan(const ParamTable& params, TensorView grads) {
  FTUNE_ASSERT(grads.dtype == DType::F32 && grads.numel() == params.total(),
               "gradients to reduce: {} f32 elements expected", params.total());
  buckets_ = plan_buckets(params, bucket_elements_);
  grads_ = static_cast<float*>(grads.data);
}

void GradientReducer::arm() {
  if (!nccl_) set_gradient_listener(this);
}

void GradientReducer::layer_done(int64_t layer) {
  size_t upto = started_;
  while (upto < buckets_.size() && buckets_[upto].stage >= layer) ++upto;
  hand_over(upto);
}

void GradientReducer::hand_over(size_t upto) {
  if (upto <= started_) return;
  started_ = upto;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued_ = upto;
  }
  cv_.notify_all();
}

void GradientReducer::work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return quit_ || done_ < queued_; });
    if (quit_) return;
    const ReduceBucket b = buckets_[done_];
    lock.unlock();
    const auto t0 = Clock::now();
    std::string error;
    try {
      group_.sum(grads_ + b.begin, b.end - b.begin);
    } catch (const std::exception& e) {
      error = e.what();
    }
    const double secs = since(t0);
    lock.lock();
    busy_seconds_ += secs;
    if (!error.empty() && error_.empty()) error_ = error;
    ++done_;
    cv_.notify_all();
  }
}

void GradientReducer::finish(TensorView scalars) {
  set_gradient_listener(nullptr);
  if (nccl_) {  // queued behind the backward on the compute stream
    int64_t elements = 0;
    for (const ReduceBucket& b : buckets_) elements = std::max(elements, b.end);
    nccl_->sum(grads_, elements);
    nccl_->sum(step_scalars_data(scalars) + kStepLoss, 1);
    ++steps_;
    return;
  }
  const auto t0 = Clock::now();
  hand_over(buckets_.size());
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_ == buckets_.size(); });
    queued_ = done_ = 0;
    if (!error_.empty()) throw Error(error_);
  }
  started_ = 0;
  wait_seconds_ += since(t0);
  // The helper is idle: this thread's MPI call does not overlap it (MPI_THREAD_SERIALIZED).
  group_.sum(step_scalars_data(scalars) + kStepLoss, 1);
  ++steps_;
}

nlohmann::json GradientReducer::report() const {
  const double busy = [&] {
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));
    return busy_seconds_;
  }();
  int64_t elements = 0;
  for (const ReduceBucket& b : buckets_) elements += b.end - b.begin;
  return {{"ranks", group_.size()},
          {"reduction", nccl_ ? "nccl" : "mpi"},
          {"buckets", buckets_.size()},
          {"bucket_mb", static_cast<double>(bucket_elements_) * 4 / (1024 * 1024)},
          {"reduced_bytes_per_step", elements * 4},
          {"steps", steps_},
          {"reduce_seconds", busy},
          {"exposed_reduce_seconds", wait_seconds_},
          {"hidden_fraction", busy > 0 ? std::max(0.0, 1.0 - wait_seconds_ / busy) : 0.0}};
}

}  // namespace ftune
