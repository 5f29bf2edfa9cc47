// The cache of built cuDNN attention plans (cuda/cudnn_attention.cc) and its failure policy, in
// plain C++ so that the policy is tested on any machine with a scripted builder:
//   - a build cuDNN answers with "not supported" (no engine for this shape, this GPU) is a
//     permanent answer for the process: it is remembered and every later request for the shape
//     throws the same SdpaNotSupported, without building again;
//   - any other failure is not an answer about the shape: out of memory (OutOfMemoryError), a CUDA
//     or cuDNN error, a bad argument (DeviceError) propagate to the caller and are NOT remembered,
//     so a later request builds again (a transient out-of-memory during one build must not turn
//     into a refusal for the rest of the run, and an error must not hide as a slow fallback);
//   - a plan whose backward is cuDNN's non-deterministic algorithm (the deterministic one was not
//     supported for the shape) is logged once with cuDNN's reason and counted
//     (GpuPath::CudnnBackwardNondeterministic, summary.json "gpu_paths").
// Builds are counted and timed (GpuPath::CudnnPlanBuilds), refusals counted
// (GpuPath::CudnnPlanRefusals).
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "core/error.h"

namespace ftune::cuda {

// cuDNN has no engine for the shape on this device: the one failure the caller answers by running
// ftune's own attention kernel instead.
class SdpaNotSupported : public DeviceError {
 public:
  using DeviceError::DeviceError;
};

enum class SdpaBuildFailure { NotSupported, OutOfMemory, Error };

// How to read a failed graph build from cudnn_frontend's error code name ("GRAPH_NOT_SUPPORTED",
// "HEURISTIC_QUERY_FAILED", ...) and its message. Out of memory (a message naming
// CUDNN_STATUS_ALLOC_FAILED, cudaErrorMemoryAllocation or "out of memory") whatever the code;
// NotSupported for the codes that mean "no engine for this graph" (GRAPH_NOT_SUPPORTED,
// HEURISTIC_QUERY_FAILED, GRAPH_EXECUTION_PLAN_CREATION_FAILED, UNSUPPORTED_GRAPH_FORMAT) and for a
// backend call that failed with a CUDNN_STATUS_NOT_SUPPORTED* status; Error for everything else.
SdpaBuildFailure classify_sdpa_build_failure(std::string_view code, std::string_view message);

// Throws the exception a failed build of `what` stands for (SdpaNotSupported, OutOfMemoryError or
// DeviceError), its message "cuDNN attention: <what>: <code>: <message>".
[[noreturn]] void throw_sdpa_build_failure(const std::string& what, std::string_view code,
                                           std::string_view message);

struct SdpaPlanKey {
  int device = 0;
  int64_t B = 0, T = 0, H = 0, D = 0;
  int dtype = 0;
  float dropout = 0;
  bool ragged = false;  // packed rows (cuDNN's ragged offsets); T is then the longest row allowed
  friend auto operator<=>(const SdpaPlanKey&, const SdpaPlanKey&) = default;
};

std::string describe_sdpa_key(const SdpaPlanKey& key);  // "B=32 T=128 H=12 D=64 dropout 0.1"

struct SdpaPlans {
  std::shared_ptr<void> graphs;  // the built graphs (cudnn_attention.cc's own type)
  int64_t forward_ws = 0, backward_ws = 0;
  bool deterministic = true;        // backward: cuDNN's deterministic algorithm
  std::string nondeterministic_why;  // cuDNN's answer for the deterministic one, when not
};

class SdpaPlanCache {
 public:
  using Builder = std::function<SdpaPlans()>;

  // The plans of `key`: cached, else built now by `build` (which throws SdpaNotSupported,
  // OutOfMemoryError or DeviceError on failure; see above for which are remembered).
  std::shared_ptr<const SdpaPlans> get(const SdpaPlanKey& key, const Builder& build);

  int64_t builds() const;    // successful builds
  int64_t refused() const;   // shapes remembered as not supported

 private:
  mutable std::mutex mu_;
  std::map<SdpaPlanKey, std::shared_ptr<const SdpaPlans>> built_;
  std::map<SdpaPlanKey, std::string> refused_;  // the refusal's message, thrown again
  int64_t builds_ = 0;
};

}  // namespace ftune::cuda
