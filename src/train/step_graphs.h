// CUDA graphs of the training step (training.cuda_graphs). A micro-batch's forward pass, loss and
// backward pass launch hundreds of kernels; on a GPU their launch cost dominates small models and
// short sequences. StepGraphs captures that region once per shape and replays it:
//   key       (rows, padded length T): the kernels' arguments are the arena's pointers and the
//             shape; every micro-batch's inputs reach the model at the same addresses (the fixed
//             buffer of train/input_staging.h, whichever staging slot carried them), so one graph
//             per shape serves both slots. What differs between micro-batches of one key — the
//             dropout offset and row0, the loss share and gradient scale — is staged with the
//             inputs in device memory (MicroParams, core/philox.h) and read by the kernels.
//             Lengths come in few values (train/input_staging.h PadRule: length buckets on a GPU).
//   1st use   runs eagerly: the warm-up in which GEMM autotuning, cuDNN graph builds and lazy
//             caches happen (none of which may run inside a capture);
//   2nd use   captures the region (nothing executes), instantiates it and launches the graph;
//   later     launches the graph.
// Work done lazily by forward() (the 16-bit weight shadow, DoRA's caches, class weights) is
// brought up to date before the region by the caller (SequenceClassifier::prepare_forward), so a
// replay never depends on it. At most max_graphs executable graphs are kept; the least recently
// used is destroyed beyond that (its key is captured again on its next use). clear() forgets all
// graphs: the trainer calls it whenever the arena is rebound (the pointers changed).
// The optimizer tail of a step (gradient norm, finish, AdamW) is a region of its own (key
// {0, 0}): its learning rate is read from the step scalars (AdamW::apply_scheduled). fp16 runs
// keep that tail eager: their loss scale is a kernel argument that changes between steps.
// A capture that fails (an unsupported call in the region, instantiation failure) turns graphs off
// for the rest of the run with one warning and runs that micro-batch eagerly; an exception of the
// region itself (e.g. out of memory) abandons the capture and propagates.
// The mechanism (begin/end/launch) is injected, so the policy is tested on the CPU with a fake.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/choice.h"
#include "core/device.h"

namespace ftune {

struct MicroGraphKey {
  int64_t rows = 0, seq = 0;
  friend auto operator<=>(const MicroGraphKey&, const MicroGraphKey&) = default;
};

struct GraphBackend {
  std::function<void()> begin;    // start capturing the compute stream
  std::function<void*()> end;     // end capturing, instantiate; throws on failure
  std::function<void()> abort;    // end an abandoned capture, discarding it (no throw)
  std::function<void(void*)> launch;
  std::function<void(void*)> destroy;
};

// The CUDA graphs of `device`'s compute stream (cuda/graph.h); NotBuiltError without CUDA.
GraphBackend cuda_graph_backend(Device device);

struct StepGraphStats {
  int64_t eager = 0;     // regions run without a graph (warm-ups, and all after a failure)
  int64_t captured = 0;  // graphs captured (each also launched once)
  int64_t replayed = 0;  // launches of an existing graph
  int64_t evicted = 0;   // graphs destroyed for max_graphs
  double capture_seconds = 0;  // capturing and instantiating (also in GpuPath::GraphCaptures)
  std::string failure;   // why graphs were turned off; empty while they are on
};

class StepGraphs {
 public:
  StepGraphs(GraphBackend backend, int64_t max_graphs);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Runs `body` (the micro-batch's region) for `key` as described above.
  void run(const MicroGraphKey& key, const std::function<void()>& body);
  void clear();  // destroys every graph and forgets every key
  const StepGraphStats& stats() const { return stats_; }
  int64_t graphs() const { return live_; }  // executable graphs held
  bool enabled() const { return stats_.failure.empty(); }

 private:
  struct Entry {
    int64_t uses = 0;
    void* exec = nullptr;
    uint64_t last_use = 0;
  };
  void evict_beyond_limit();

  GraphBackend backend_;
  int64_t max_graphs_;
  std::map<MicroGraphKey, Entry> entries_;
  int64_t live_ = 0;
  uint64_t clock_ = 0;
  StepGraphStats stats_;
};

// Runs `body` through `graphs` under `key` where there are graphs and the region may be graphed,
// else eagerly: a region with host code that must run each time (an injected failure, the layer
// reports of a data-parallel backward), or whose kernel arguments change between runs (packed
// micro-batches; fp16's optimizer tail, whose loss scale is an argument).
void run_graphed_or_eager(StepGraphs* graphs, bool graphable, const MicroGraphKey& key,
                          const std::function<void()>& body);

// Why packed micro-batches are not captured (summary.json cuda_graphs.packed_micro_batches): a
// graph replays fixed kernel arguments, and a packed micro-batch's token and row counts differ
// from one micro-batch to the next (filled with whole rows up to the token budget), so a graph
// keyed by them would almost never be replayed.
inline constexpr const char* kPackedMicroBatchesEager =
    "packed micro-batches run eagerly (their token and row counts vary from one to the next; the "
    "optimizer step is still graphed)";

// The optimizer tail's key: no micro-batch has 0 rows.
inline constexpr MicroGraphKey kOptimizerTailGraphKey{0, 0};

struct ResolvedCudaGraphs {
  bool on = false;
  std::string why;
};
// training.cuda_graphs (auto | on | off) for a run on `device`: auto is on for CUDA devices; on is
// an error (naming the key) on the CPU.
ResolvedCudaGraphs resolve_cuda_graphs(Switch value, Device device);
// The same from the key's word (auto, on or off; else InputError naming the key).
ResolvedCudaGraphs resolve_cuda_graphs(std::string_view value, Device device);

}  // namespace ftune
