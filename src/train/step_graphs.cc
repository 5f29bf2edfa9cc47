// CUDA graphs of the training step: the capture / replay policy (see step_graphs.h).
#include "train/step_graphs.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "core/error.h"
#include "core/gpu_paths.h"
#ifdef FTUNE_WITH_CUDA
#include "cuda/graph.h"
#endif

namespace ftune {

GraphBackend cuda_graph_backend(Device device) {
#ifdef FTUNE_WITH_CUDA
  FTUNE_ASSERT(!device.is_cpu(), "CUDA graphs for a CPU run");
  return GraphBackend{[device] { cuda::graph_capture_begin(device); },
                      [device] { return cuda::graph_capture_end(device); },
                      [device] { cuda::graph_capture_abort(device); },
                      [device](void* exec) { cuda::graph_launch(device, exec); },
                      [](void* exec) { cuda::graph_destroy(exec); }};
#else
  (void)device;
  throw NotBuiltError("CUDA graphs: ftune was built without CUDA");
#endif
}

StepGraphs::StepGraphs(GraphBackend backend, int64_t max_graphs)
    : backend_(std::move(backend)), max_graphs_(max_graphs) {
  FTUNE_ASSERT(max_graphs >= 1, "StepGraphs needs room for one graph, got {}", max_graphs);
}

StepGraphs::~StepGraphs() { clear(); }

void StepGraphs::clear() {
  for (auto& [key, e] : entries_)
    if (e.exec) backend_.destroy(e.exec);
  entries_.clear();
  live_ = 0;
}

void StepGraphs::run(const MicroGraphKey& key, const std::function<void()>& body) {
  if (!enabled()) {
    body();
    ++stats_.eager;
    return;
  }
  Entry& e = entries_[key];
  e.last_use = ++clock_;
  if (e.exec) {
    backend_.launch(e.exec);
    ++stats_.replayed;
    count_gpu_path(GpuPath::GraphReplays);
    return;
  }
  if (e.uses++ == 0) {  // warm-up: autotuning, cuDNN plans and lazy caches happen eagerly
    body();
    ++stats_.eager;
    return;
  }
  void* exec = nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    backend_.begin();
    try {
      body();
    } catch (...) {
      backend_.abort();
      throw;
    }
    exec = backend_.end();
  } catch (const DeviceError& err) {
    stats_.failure = err.what();
  } catch (const InternalError& err) {  // e.g. a host copy inside the region (cuda/graph.h)
    stats_.failure = err.what();
  }
  if (!exec) {
    spdlog::warn(
        "CUDA graph capture of a {} x {} micro-batch failed ({}); training goes on without CUDA "
        "graphs (training.cuda_graphs off avoids the attempt)",
        key.rows, key.seq, stats_.failure);
    clear();
    body();  // nothing ran during the capture
    ++stats_.eager;
    return;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats_.capture_seconds += seconds;
  count_gpu_path_timed(GpuPath::GraphCaptures, seconds);
  e.exec = exec;
  ++live_;
  ++stats_.captured;
  backend_.launch(exec);
  evict_beyond_limit();
}

void StepGraphs::evict_beyond_limit() {
  while (live_ > max_graphs_) {
    Entry* oldest = nullptr;
    for (auto& [key, e] : entries_)
      if (e.exec && (!oldest || e.last_use < oldest->last_use)) oldest = &e;
    backend_.destroy(oldest->exec);
    oldest->exec = nullptr;
    --live_;
    ++stats_.evicted;
  }
}

void run_graphed_or_eager(StepGraphs* graphs, bool graphable, const MicroGraphKey& key,
                          const std::function<void()>& body) {
  if (graphs && graphable)
    graphs->run(key, body);
  else
    body();
}

ResolvedCudaGraphs resolve_cuda_graphs(std::string_view value, Device device) {
  return resolve_cuda_graphs(parse_choice<Switch>(value, "key 'training.cuda_graphs'"), device);
}

ResolvedCudaGraphs resolve_cuda_graphs(Switch value, Device device) {
  const char* key = "training.cuda_graphs";
  if (value == Switch::Off) return {false, "training.cuda_graphs off"};
  if (device.is_cpu()) {
    if (value == Switch::On)
      throw InputError(fmt::format(
          "key '{}' is 'on', which needs a CUDA device (the run is on the CPU); use auto or off",
          key));
    return {false, "the CPU runs kernels directly"};
  }
  if (value == Switch::On) return {true, "training.cuda_graphs on"};
  return {true,
          "auto: each micro-batch shape's forward and backward pass is captured once and "
          "replayed"};
}

}  // namespace ftune
