// The cuDNN attention plan cache and its failure policy (see sdpa_plan_cache.h).
#include "cuda/sdpa_plan_cache.h"

#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/gpu_paths.h"

namespace ftune::cuda {

SdpaBuildFailure classify_sdpa_build_failure(std::string_view code, std::string_view message) {
  const auto has = [&](std::string_view needle) {
    return message.find(needle) != std::string_view::npos;
  };
  // An allocation that failed is never an answer about the shape, whatever the code says.
  if (has("CUDNN_STATUS_ALLOC_FAILED") || has("cudaErrorMemoryAllocation") ||
      has("out of memory") || code == "CUDNN_STATUS_ALLOC_FAILED")
    return SdpaBuildFailure::OutOfMemory;
  if (code == "GRAPH_NOT_SUPPORTED" || code == "HEURISTIC_QUERY_FAILED" ||
      code == "GRAPH_EXECUTION_PLAN_CREATION_FAILED" || code == "UNSUPPORTED_GRAPH_FORMAT")
    return SdpaBuildFailure::NotSupported;
  if (code == "CUDNN_BACKEND_API_FAILED" && has("CUDNN_STATUS_NOT_SUPPORTED"))
    return SdpaBuildFailure::NotSupported;
  return SdpaBuildFailure::Error;
}

void throw_sdpa_build_failure(const std::string& what, std::string_view code,
                              std::string_view message) {
  const std::string text = fmt::format("cuDNN attention: {}: {}: {}", what, code, message);
  switch (classify_sdpa_build_failure(code, message)) {
    case SdpaBuildFailure::NotSupported: throw SdpaNotSupported(text);
    case SdpaBuildFailure::OutOfMemory: throw OutOfMemoryError(text);
    case SdpaBuildFailure::Error: break;
  }
  throw DeviceError(text);
}

std::string describe_sdpa_key(const SdpaPlanKey& k) {
  return fmt::format("B={} T={} H={} D={} {} dropout {:g}{}", k.B, k.T, k.H, k.D,
                     k.dtype == 0 ? "bf16" : "f16", k.dropout, k.ragged ? " ragged" : "");
}

std::shared_ptr<const SdpaPlans> SdpaPlanCache::get(const SdpaPlanKey& key, const Builder& build) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = built_.find(key); it != built_.end()) return it->second;
  if (auto it = refused_.find(key); it != refused_.end()) throw SdpaNotSupported(it->second);
  const auto t0 = std::chrono::steady_clock::now();
  SdpaPlans plans;
  try {
    plans = build();
  } catch (const SdpaNotSupported& e) {
    refused_.emplace(key, e.what());
    count_gpu_path(GpuPath::CudnnPlanRefusals);
    throw;
  }
  // Anything else thrown above (out of memory, a CUDA or cuDNN error) propagates unremembered.
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  count_gpu_path_timed(GpuPath::CudnnPlanBuilds, seconds);
  ++builds_;
  if (!plans.deterministic) {
    count_gpu_path(GpuPath::CudnnBackwardNondeterministic);
    spdlog::warn(
        "cuDNN attention {}: no deterministic backward for this shape ({}); cuDNN's default "
        "backward runs it, whose gradients may differ in the last bits from run to run "
        "(summary.json gpu_paths.cudnn_plans.nondeterministic_backward)",
        describe_sdpa_key(key), plans.nondeterministic_why);
  }
  spdlog::debug("cuDNN attention {}: plans built in {:.3f} s", describe_sdpa_key(key), seconds);
  auto shared = std::make_shared<const SdpaPlans>(std::move(plans));
  built_.emplace(key, shared);
  return shared;
}

int64_t SdpaPlanCache::builds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return builds_;
}

int64_t SdpaPlanCache::refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(refused_.size());
}

}  // namespace ftune::cuda
