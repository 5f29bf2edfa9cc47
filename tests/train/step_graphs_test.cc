// The CUDA-graph policy of the training step (train/step_graphs.h) with a scripted backend:
// warm-up, capture, replay per key, eviction of the least recently used graph, clear(), a failed
// capture turning graphs off (and the micro-batch still running), an exception inside the region
// abandoning the capture; and the two settings' resolution.
#include "train/step_graphs.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gpu_paths.h"
#include "train/input_staging.h"

namespace ftune {
namespace {

// Records every backend call; a "graph" is the number of the capture that made it.
struct Script {
  std::vector<std::string> calls;
  bool capturing = false;
  int next_graph = 1;
  bool fail_end = false;
  GraphBackend backend() {
    return GraphBackend{
        [this] {
          calls.push_back("begin");
          capturing = true;
        },
        [this]() -> void* {
          capturing = false;
          calls.push_back("end");
          if (fail_end) throw DeviceError("cudaErrorStreamCaptureUnsupported");
          return reinterpret_cast<void*>(static_cast<intptr_t>(next_graph++));
        },
        [this] {
          capturing = false;
          calls.push_back("abort");
        },
        [this](void* g) { calls.push_back("launch " + std::to_string(intptr_t(g))); },
        [this](void* g) { calls.push_back("destroy " + std::to_string(intptr_t(g))); }};
  }
};

std::vector<std::string> take(Script& s) {
  std::vector<std::string> c;
  c.swap(s.calls);
  return c;
}

using Calls = std::vector<std::string>;

TEST(StepGraphs, WarmsUpThenCapturesThenReplaysEachKey) {
  Script s;
  StepGraphs graphs(s.backend(), 8);
  int eager = 0, captured = 0;
  const auto body = [&] { s.capturing ? ++captured : ++eager; };
  const MicroGraphKey a{4, 64}, b{4, 72};
  graphs.run(a, body);  // warm-up: runs for real
  EXPECT_EQ(eager, 1);
  EXPECT_EQ(take(s), Calls{});
  graphs.run(a, body);  // captured (the body is recorded, not run) and launched
  EXPECT_EQ(captured, 1);
  EXPECT_EQ(take(s), (Calls{"begin", "end", "launch 1"}));
  graphs.run(a, body);  // replayed: the body is not called at all
  graphs.run(a, body);
  EXPECT_EQ(take(s), (Calls{"launch 1", "launch 1"}));
  EXPECT_EQ(eager + captured, 2);
  graphs.run(b, body);  // another length is another key
  graphs.run(b, body);
  EXPECT_EQ(take(s), (Calls{"begin", "end", "launch 2"}));
  EXPECT_EQ(graphs.graphs(), 2);
  const StepGraphStats& st = graphs.stats();
  EXPECT_EQ(st.eager, 2);
  EXPECT_EQ(st.captured, 2);
  EXPECT_EQ(st.replayed, 2);
  EXPECT_TRUE(graphs.enabled());
}

TEST(StepGraphs, KeepsAtMostTheLimitDroppingTheLeastRecentlyUsed) {
  Script s;
  StepGraphs graphs(s.backend(), 2);
  const auto body = [] {};
  const MicroGraphKey k1{1, 8}, k2{1, 16}, k3{1, 24};
  for (const auto& k : {k1, k1, k2, k2}) graphs.run(k, body);
  graphs.run(k1, body);  // k1 used last: k2 is the oldest
  take(s);
  graphs.run(k3, body);
  graphs.run(k3, body);
  EXPECT_EQ(take(s), (Calls{"begin", "end", "launch 3", "destroy 2"}));
  EXPECT_EQ(graphs.graphs(), 2);
  EXPECT_EQ(graphs.stats().evicted, 1);
  // The evicted key was seen: its next use captures at once (no second warm-up).
  graphs.run(k2, body);
  EXPECT_EQ(take(s), (Calls{"begin", "end", "launch 4", "destroy 1"}));
}

TEST(StepGraphs, ClearDestroysEveryGraphAndStartsOver) {
  Script s;
  {
    StepGraphs graphs(s.backend(), 4);
    int ran = 0;
    const auto body = [&] { ran += !s.capturing; };
    const MicroGraphKey k{2, 32};
    graphs.run(k, body);
    graphs.run(k, body);
    take(s);
    graphs.clear();  // e.g. the arena was rebuilt
    EXPECT_EQ(take(s), Calls{"destroy 1"});
    graphs.run(k, body);  // a warm-up again
    EXPECT_EQ(ran, 2);
    graphs.run(k, body);
    EXPECT_EQ(take(s), (Calls{"begin", "end", "launch 2"}));
  }
  EXPECT_EQ(take(s), Calls{"destroy 2"});  // the destructor
}

TEST(StepGraphs, AFailedCaptureTurnsGraphsOffAndStillRunsTheMicroBatch) {
  Script s;
  StepGraphs graphs(s.backend(), 4);
  int ran = 0;
  const auto body = [&] { ran += !s.capturing; };
  const MicroGraphKey ok{1, 8}, bad{1, 16};
  graphs.run(ok, body);
  graphs.run(ok, body);
  graphs.run(bad, body);
  take(s);
  s.fail_end = true;
  graphs.run(bad, body);
  EXPECT_EQ(take(s), (Calls{"begin", "end", "destroy 1"}));
  EXPECT_EQ(ran, 3);  // the failed capture's micro-batch ran eagerly
  EXPECT_FALSE(graphs.enabled());
  EXPECT_NE(graphs.stats().failure.find("cudaErrorStreamCaptureUnsupported"), std::string::npos);
  graphs.run(ok, body);  // everything eager from now on
  EXPECT_EQ(take(s), Calls{});
  EXPECT_EQ(ran, 4);
}

TEST(StepGraphs, AHostSyncInsideTheRegionTurnsGraphsOff) {
  Script s;
  StepGraphs graphs(s.backend(), 4);
  int ran = 0;
  const auto body = [&] {
    if (s.capturing) throw InternalError("a 12 byte host-to-device copy inside a CUDA graph capture");
    ++ran;
  };
  const MicroGraphKey k{1, 8};
  graphs.run(k, body);
  graphs.run(k, body);
  EXPECT_EQ(take(s), (Calls{"begin", "abort"}));
  EXPECT_EQ(ran, 2);
  EXPECT_FALSE(graphs.enabled());
}

TEST(StepGraphs, AnErrorOfTheRegionAbandonsTheCaptureAndPropagates) {
  Script s;
  StepGraphs graphs(s.backend(), 4);
  bool fail = false;
  const auto body = [&] {
    if (fail) throw OutOfMemoryError("injected");
  };
  const MicroGraphKey k{3, 8};
  graphs.run(k, body);
  fail = true;
  EXPECT_THROW(graphs.run(k, body), OutOfMemoryError);
  EXPECT_EQ(take(s), (Calls{"begin", "abort"}));
  EXPECT_TRUE(graphs.enabled());  // not the mechanism's fault: graphs stay on
  fail = false;
  graphs.run(k, body);
  EXPECT_EQ(take(s), (Calls{"begin", "end", "launch 1"}));
}

TEST(StepGraphSettings, ResolveForTheDevice) {
  EXPECT_FALSE(resolve_cuda_graphs("auto", Device::cpu()).on);
  EXPECT_FALSE(resolve_cuda_graphs("off", Device::cuda(0)).on);
  EXPECT_TRUE(resolve_cuda_graphs("auto", Device::cuda(0)).on);
  EXPECT_TRUE(resolve_cuda_graphs("on", Device::cuda(0)).on);
  try {
    resolve_cuda_graphs("on", Device::cpu());
    FAIL() << "cuda_graphs on accepted on the CPU";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("training.cuda_graphs"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve_cuda_graphs("yes", Device::cuda(0)), InputError);
}

TEST(StepGraphs, CapturesAndReplaysAreCountedWithTheCaptureTime) {
  Script s;
  StepGraphs graphs(s.backend(), 8);
  const GpuPathCounts before = gpu_path_counts();
  const MicroGraphKey k{2, 16};
  for (int i = 0; i < 4; ++i) graphs.run(k, [] {});
  const GpuPathCounts d = gpu_path_counts() - before;
  EXPECT_EQ(d[GpuPath::GraphCaptures], 1);
  EXPECT_EQ(d[GpuPath::GraphReplays], 2);
  EXPECT_GE(d.seconds_of(GpuPath::GraphCaptures), 0.0);
  // The counters keep whole nanoseconds (core/gpu_paths.cc), the stats the double.
  EXPECT_NEAR(graphs.stats().capture_seconds, d.seconds_of(GpuPath::GraphCaptures), 2e-9);
}

TEST(PadRule, AutoIsLengthBucketsOnAGpuAndNothingOnTheCpu) {
  const PadRule cpu = resolve_padding(0, Device::cpu());
  EXPECT_EQ(cpu.length(37, 128), 37);
  const PadRule fixed = resolve_padding(16, Device::cpu());
  EXPECT_EQ(fixed.length(37, 128), 48);
  EXPECT_EQ(fixed.length(37, 40), 40);  // never past the cap
  EXPECT_THROW(resolve_padding(-1, Device::cpu()), InputError);
  const PadRule gpu = resolve_padding(0, Device::cuda(0));
  EXPECT_TRUE(gpu.buckets);
  EXPECT_EQ(gpu.length(1, 512), 8);
  EXPECT_EQ(gpu.length(64, 512), 64);
  EXPECT_EQ(gpu.length(65, 512), 80);
  EXPECT_EQ(gpu.length(100, 512), 112);
  EXPECT_EQ(gpu.length(128, 512), 128);
  EXPECT_EQ(gpu.length(129, 512), 160);
  EXPECT_EQ(gpu.length(257, 512), 320);
  EXPECT_EQ(gpu.length(500, 512), 512);
  EXPECT_EQ(gpu.length(100, 100), 100);  // the cap (max_seq) is a length too
  // Every length up to 512 lands on one of 20 lengths, each at most 25% above it (8 at most
  // below 64), and a micro-batch's length never exceeds its step's (the step's is a cap).
  std::set<int64_t> lengths;
  for (int64_t n = 1; n <= 512; ++n) {
    const int64_t p = gpu.length(n, 512);
    lengths.insert(p);
    EXPECT_GE(p, n);
    EXPECT_LE(p, std::max<int64_t>(n + 7, n + n / 4)) << n;
    for (int64_t m = 1; m <= n; ++m) ASSERT_LE(gpu.length(m, p), p);
  }
  EXPECT_EQ(lengths.size(), 20u);
}

}  // namespace
}  // namespace ftune
