// Data-parallel gradient reduction (see gradient_reducer.h).
#include "dist/gradient_reducer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <regex>

#include "core/error.h"

namespace ftune {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

std::pair<int64_t, int64_t> rank_rows(int64_t rows, int rank, int size, int64_t group_size) {
  FTUNE_ASSERT(group_size >= 1 && rows % group_size == 0,
               "a step batch of {} rows is not whole groups of {}", rows, group_size);
  const int64_t groups = rows / group_size;
  return {groups * rank / size * group_size, groups * (rank + 1) / size * group_size};
}

int64_t param_layer(const std::string& name) {
  static const std::regex layer(R"((^|\.)layers?\.(\d+)\.)");
  std::smatch m;
  return std::regex_search(name, m, layer) ? std::stoll(m[2].str()) : -1;
}

std::vector<ReduceBucket> plan_buckets(const ParamTable& params, int64_t max_elements) {
  std::vector<ReduceBucket> out;
  const std::vector<ParamSpec>& specs = params.specs();
  int64_t covered_to = params.total();         // everything at or above it is in a bucket
  const auto close_gap = [&](int64_t below) {  // elements no parameter names: reduced last
    if (below < covered_to) out.push_back({below, covered_to, -1});
    covered_to = below;
  };
  for (auto it = specs.rbegin(); it != specs.rend(); ++it) {
    const int64_t begin = it->offset, end = it->offset + it->shape.numel();
    const int64_t stage = param_layer(it->name);
    ReduceBucket* b = out.empty() ? nullptr : &out.back();
    const bool joins = b && end == b->begin && end == covered_to &&
                       (b->stage >= 0) == (stage >= 0) && b->end - begin <= max_elements;
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

size_t buckets_final_after(const std::vector<ReduceBucket>& buckets, size_t started,
                           int64_t layer) {
  size_t upto = started;
  while (upto < buckets.size() && buckets[upto].stage >= layer) ++upto;
  return upto;
}

StepVerdict judge_step(const std::vector<int64_t>& kinds, int64_t ranks_that_cannot_halve) {
  StepVerdict v;
  v.out_of_memory = true;
  for (size_t r = 0; r < kinds.size(); ++r) {
    if (kinds[r] == RankFailure::kNone) continue;
    if (v.first < 0) v.first = static_cast<int>(r);
    v.out_of_memory = v.out_of_memory && kinds[r] == RankFailure::kOutOfMemory;
  }
  if (v.first < 0) return StepVerdict{};
  v.kind =
      v.out_of_memory && ranks_that_cannot_halve == 0 ? StepVerdict::kFallBack : StepVerdict::kStop;
  return v;
}

GradientReducer::GradientReducer(ProcessGroup& group, Device device, double bucket_mb)
    : GradientReducer(group, make_reduce_transport(group, device), bucket_mb) {}

GradientReducer::GradientReducer(ProcessGroup& group, std::unique_ptr<ReduceTransport> transport,
                                 double bucket_mb)
    : group_(group),
      transport_(std::move(transport)),
      bucket_elements_(std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1024 * 1024 / 4))) {}

GradientReducer::~GradientReducer() {
  if (armed_) set_gradient_listener(nullptr);
}

void GradientReducer::plan(const ParamTable& params, TensorView grads) {
  FTUNE_ASSERT(grads.dtype == DType::F32 && grads.numel() == params.total(),
               "gradients to reduce: {} f32 elements expected", params.total());
  buckets_ = plan_buckets(params, bucket_elements_);
  grads_ = static_cast<float*>(grads.data);
}

void GradientReducer::arm() {
  set_gradient_listener(this);
  armed_ = true;
}

void GradientReducer::layer_done(int64_t layer) {
  const size_t before = started_;
  start_upto(buckets_final_after(buckets_, started_, layer));
  started_in_backward_ += static_cast<int64_t>(started_ - before);
}

void GradientReducer::start_upto(size_t upto) {
  for (; started_ < upto; ++started_) {
    const ReduceBucket& b = buckets_[started_];
    transport_->start(started_, grads_ + b.begin, b.end - b.begin);
  }
}

void GradientReducer::finish(double* step_loss, const RankFailure& failure, bool can_halve) {
  set_gradient_listener(nullptr);
  armed_ = false;
  const auto t0 = Clock::now();
  start_upto(buckets_.size());
  started_ = 0;
  transport_->join();
  wait_seconds_ += since(t0);
  agree(failure, can_halve);
  transport_->sum_step_loss(step_loss);
  ++steps_;
}

void GradientReducer::agree(const RankFailure& failure, bool can_halve) {
  // Each rank's failure kind, and how many ranks cannot halve their micro-batch.
  std::vector<int64_t> counts(static_cast<size_t>(group_.size()) + 1, 0);
  counts[static_cast<size_t>(group_.rank())] = failure.kind;
  counts.back() = can_halve ? 0 : 1;
  group_.sum(counts.data(), static_cast<int64_t>(counts.size()));
  const int64_t cannot_halve = counts.back();
  counts.pop_back();
  const StepVerdict v = judge_step(counts, cannot_halve);
  if (v.kind == StepVerdict::kOk) return;
  // The first failing rank's cause, for every rank's message.
  constexpr size_t kText = 1024;
  std::string cause(kText, '\0');
  if (group_.rank() == v.first)
    cause.replace(0, std::min(kText - 1, failure.what.size()), failure.what.substr(0, kText - 1));
  group_.broadcast(cause.data(), static_cast<int64_t>(kText), v.first);
  cause.resize(cause.find('\0'));
  if (v.kind == StepVerdict::kFallBack) {
    if (group_.rank() == v.first) throw OutOfMemoryError(cause);
    throw OutOfMemoryError(
        fmt::format("rank {} ran out of memory ({}); every rank falls back", v.first, cause));
  }
  // An Error, not OutOfMemoryError: no rank falls back alone.
  const std::string why = v.out_of_memory ? "; the micro-batch cannot be halved on every rank" : "";
  if (group_.rank() == v.first)
    throw RanksStopped(fmt::format("{}{}; every rank stops", cause, why));
  throw RanksStopped(
      fmt::format("rank {} failed in this step: {}{}; every rank stops", v.first, cause, why));
}

nlohmann::json GradientReducer::report() const {
  const double busy = transport_->busy_seconds();
  int64_t elements = 0;
  for (const ReduceBucket& b : buckets_) elements += b.end - b.begin;
  nlohmann::json j = {{"ranks", group_.size()},
                      {"reduction", transport_->name()},
                      {"buckets", buckets_.size()},
                      {"bucket_mb", static_cast<double>(bucket_elements_) * 4 / (1024 * 1024)},
                      {"reduced_bytes_per_step", elements * 4},
                      {"steps", steps_},
                      {"buckets_started_in_backward", started_in_backward_},
                      {"exposed_reduce_seconds", wait_seconds_}};
  if (busy >= 0) {
    j["reduce_seconds"] = busy;
    j["hidden_fraction"] = busy > 0 ? std::max(0.0, 1.0 - wait_seconds_ / busy) : 0.0;
  } else {  // NCCL: the host queues the sums; their time is on the GPU's timeline
    j["reduce_seconds"] = nullptr;
    j["hidden_fraction"] = nullptr;
  }
  return j;
}

}  // namespace ftune
