// Per-op time of one training step (see op_profile.h).
#include "core/op_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/device_backend.h"

namespace ftune::profile {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Entry {
  const char* name;
  int parent;  // index of the enclosing scope, -1 at the top
  Clock::time_point t0, t1;
  void* begin = nullptr;  // CUDA events (GPU steps)
  void* end = nullptr;
};

// One recording at a time, on the thread that started it (the trainer's); scopes opened on other
// threads or for another kind of device (host-side work of a GPU step) are not timed.
struct Recording {
  std::atomic<bool> on{false};
  std::thread::id thread;
  Device device;
  std::vector<Entry> entries;
  int open = -1;  // the innermost open scope
  Clock::time_point t0;
  std::vector<void*> events;  // timing events, created on first use and reused by later steps
  size_t next_event = 0;
  void* step_begin = nullptr;
  void* step_end = nullptr;
};

Recording& rec() {
  static Recording r;
  return r;
}

void* take_event(Recording& r) {
  if (r.next_event == r.events.size())
    r.events.push_back(require_cuda_backend("timing events").timing_event_create(r.device));
  return r.events[r.next_event++];
}

// Marks a point of the step: the host clock, and on a GPU an event on the compute stream.
void mark(Recording& r, Clock::time_point* t, void** event) {
  if (r.device.kind == DeviceKind::CUDA) {
    *event = take_event(r);
    require_cuda_backend("timing events").record_event(r.device, *event);
  }
  *t = Clock::now();
}

double elapsed_ms(const Recording& r, Clock::time_point t0, Clock::time_point t1, void* e0,
                  void* e1) {
  if (r.device.kind == DeviceKind::CUDA)
    return require_cuda_backend("timing events").event_elapsed_ms(e0, e1);
  return ms_between(t0, t1);
}

}  // namespace

bool ops_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("FTUNE_PROFILE_OPS");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

int64_t profiled_step(int64_t total_steps) {
  int64_t step = 3;
  if (const char* v = std::getenv("FTUNE_PROFILE_STEP"); v && *v) step = std::atoll(v);
  return std::clamp<int64_t>(step, 1, std::max<int64_t>(total_steps, 1));
}

OpScope::OpScope(const char* name, Device device) {
  Recording& r = rec();
  if (!r.on.load(std::memory_order_relaxed)) return;
  if (std::this_thread::get_id() != r.thread || device.kind != r.device.kind) return;
  index_ = static_cast<int>(r.entries.size());
  r.entries.push_back(Entry{name, r.open, {}, {}});
  r.open = index_;
  Entry& e = r.entries.back();
  mark(r, &e.t0, &e.begin);
}

OpScope::~OpScope() {
  if (index_ < 0) return;
  Recording& r = rec();
  if (!r.on.load(std::memory_order_relaxed)) return;  // the step was abandoned meanwhile
  Entry& e = r.entries[static_cast<size_t>(index_)];
  mark(r, &e.t1, &e.end);
  r.open = e.parent;
}

StepRecorder::StepRecorder(int64_t step, int64_t total_steps, Device device)
    : StepRecorder(step, device, ops_enabled() && step == profiled_step(total_steps)) {}

StepRecorder StepRecorder::always(int64_t step, Device device) {
  return StepRecorder(step, device, true);
}

StepRecorder::StepRecorder(int64_t step, Device device, bool record)
    : step_(step), device_(device) {
  if (!record) return;
  Recording& r = rec();
  if (r.on.load()) return;  // one recording at a time
  r.thread = std::this_thread::get_id();
  r.device = device;
  r.entries.clear();
  r.entries.reserve(4096);
  r.open = -1;
  r.next_event = 0;
  mark(r, &r.t0, &r.step_begin);
  active_ = true;
  r.on.store(true);
}

StepRecorder::~StepRecorder() {
  if (active_) rec().on.store(false);
}

StepProfile StepRecorder::finish() {
  StepProfile p;
  if (!active_) return p;
  Recording& r = rec();
  Clock::time_point t_end;
  mark(r, &t_end, &r.step_end);
  if (device_.kind == DeviceKind::CUDA) require_cuda_backend("synchronize").synchronize(device_);
  r.on.store(false);
  active_ = false;
  p.step = step_;
  p.device = device_name(device_);
  p.clock = device_.kind == DeviceKind::CUDA ? "CUDA events, eager launches" : "host clock";
  p.host_step_ms = ms_between(r.t0, Clock::now());
  p.step_ms = elapsed_ms(r, r.t0, t_end, r.step_begin, r.step_end);
  // Inclusive time per scope, then exclusive = inclusive - the inclusive time of its children.
  std::vector<double> inclusive(r.entries.size()), exclusive(r.entries.size());
  for (size_t i = 0; i < r.entries.size(); ++i) {
    const Entry& e = r.entries[i];
    inclusive[i] = elapsed_ms(r, e.t0, e.t1, e.begin, e.end);
    exclusive[i] += inclusive[i];
    if (e.parent >= 0) exclusive[static_cast<size_t>(e.parent)] -= inclusive[i];
  }
  std::map<std::string, OpRow> rows;
  for (size_t i = 0; i < r.entries.size(); ++i) {
    std::string key = r.entries[i].name;
    for (int p = r.entries[i].parent; p >= 0; p = r.entries[static_cast<size_t>(p)].parent)
      key = std::string(r.entries[static_cast<size_t>(p)].name) + " > " + key;
    OpRow& row = rows[key];
    row.name = key;
    row.ms += std::max(exclusive[i], 0.0);
    ++row.calls;
  }
  for (auto& [key, row] : rows) {
    p.ops.push_back(row);
    p.ops_ms += row.ms;
  }
  std::sort(p.ops.begin(), p.ops.end(),
            [](const OpRow& a, const OpRow& b) { return a.ms != b.ms ? a.ms > b.ms : a.name < b.name; });
  p.gap_ms = p.step_ms - p.ops_ms;
  return p;
}

nlohmann::json StepProfile::to_json() const {
  nlohmann::json ops = nlohmann::json::array();
  for (const OpRow& r : this->ops) ops.push_back({{"name", r.name}, {"ms", r.ms}, {"calls", r.calls}});
  return {{"step", step},     {"device", device}, {"clock", clock},   {"step_ms", step_ms},
          {"host_step_ms", host_step_ms},          {"ops_ms", ops_ms}, {"gap_ms", gap_ms},
          {"ops", ops}};
}

std::string StepProfile::table(size_t max_rows) const {
  const double step = std::max(step_ms, 1e-9);
  std::string out = fmt::format(
      "op time of step {} on {} ({}): step {:.3f} ms (host {:.3f} ms)\n  {:<52} {:>10} {:>7} "
      "{:>6}\n",
      this->step, device, clock, step_ms, host_step_ms, "op", "ms", "% step", "calls");
  int64_t calls = 0;
  for (const OpRow& r : ops) calls += r.calls;
  double rest_ms = 0;
  int64_t rest_calls = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (i < max_rows) {
      out += fmt::format("  {:<52} {:>10.3f} {:>6.1f}% {:>6}\n", ops[i].name, ops[i].ms,
                         100 * ops[i].ms / step, ops[i].calls);
    } else {
      rest_ms += ops[i].ms;
      rest_calls += ops[i].calls;
    }
  }
  if (ops.size() > max_rows)
    out += fmt::format("  {:<52} {:>10.3f} {:>6.1f}% {:>6}\n",
                       fmt::format("({} more ops)", ops.size() - max_rows), rest_ms,
                       100 * rest_ms / step, rest_calls);
  out += fmt::format("  {:<52} {:>10.3f} {:>6.1f}% {:>6}\n", "all ops", ops_ms, 100 * ops_ms / step,
                     calls);
  out += fmt::format("  {:<52} {:>10.3f} {:>6.1f}%\n", "gap (launch gaps, host waits, non-op work)",
                     gap_ms, 100 * gap_ms / step);
  return out;
}

}  // namespace ftune::profile
