// Training and evaluation progress for people watching a run. On a terminal: one line redrawn in
// place with '\r' (bar, step/total, epoch, loss, samples/s, real tokens/s, elapsed and ETA, GPU
// utilisation and memory when a sampler feeds set_status(); or,
// during evaluation, batches done/total and rows/s), at most ~10 times a second. Elsewhere (a log
// file, CI): a plain spdlog line every `log_every` steps. spdlog lines printed while the bar is
// shown would land in the middle of it, so attach() wraps the logger's sinks: each log line first
// clears the bar, then the bar is drawn again below it.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

namespace ftune {

// Where training stands; counters are cumulative since begin_training().
struct TrainProgress {
  int64_t step = 0;     // optimizer steps done
  int64_t epoch = 1;    // current epoch, 1-based
  double loss = 0;      // recent training loss
  int64_t samples = 0;  // training rows processed
  int64_t tokens = 0;   // real (non-padding) tokens processed
  // The share of the computed tokens that was padding ("pad 12.5%"; 0% with packed batches);
  // negative: not shown.
  double padding = -1;
};

struct ProgressOptions {
  bool terminal = false;            // redraw one line (true) or log plain lines (false)
  int64_t log_every = 50;           // plain mode: a line every this many steps / eval batches
  double min_redraw_seconds = 0.1;  // terminal mode: at most one redraw per this interval
  int columns = 0;                  // terminal width; the line is cut to columns - 1 (0: no cut)
  int bar_width = 20;
};

// "MM:SS", or "H:MM:SS" from an hour on; "?" for a negative or non-finite time.
std::string format_duration(double seconds);
// 3 significant digits with k / M / G suffixes: 412, 41.2k, 1.23M.
std::string format_rate(double per_second);

class ProgressBar {
 public:
  using Clock = std::function<double()>;  // monotonic seconds

  // The bar is written to `out` (terminal mode), plain lines go through `logger`.
  ProgressBar(std::ostream& out, std::shared_ptr<spdlog::logger> logger, ProgressOptions options,
              Clock clock);
  // For a real run: stderr, terminal mode iff isatty(stderr) (width from the terminal), a steady
  // clock, spdlog's default logger (attached, so every spdlog line keeps the bar intact).
  static std::unique_ptr<ProgressBar> for_stderr(int64_t log_every);
  ~ProgressBar();  // detaches, ending a drawn line with a newline
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Terminal mode: wraps each sink of `logger` so its lines clear the bar first and redraw it
  // after. Undone by the destructor. Plain mode: nothing to do.
  void attach(const std::shared_ptr<spdlog::logger>& logger);

  void begin_training(int64_t total_steps, int64_t epochs);
  void update(const TrainProgress& progress);
  // An evaluation pass of `total_batches` batches named `name` ("eval", "test"); its time is not
  // counted in the training rates and ETA.
  void begin_eval(const std::string& name, int64_t total_batches);
  void update_eval(int64_t batches_done, int64_t rows_done);
  void end_eval();
  // Draws the final state and ends the line (terminal mode).
  void finish();

  // Extra text for the training line (the GPU sampler's "gpu 97% 41.2/79.6 GiB"), asked for at
  // each render and appended when not empty. Called under the bar's lock: it must be cheap and
  // must not log.
  void set_status(std::function<std::string()> status);

  // Logs through the bar's logger; with the bar attached, the line appears above the bar.
  void log(spdlog::level::level_enum level, const std::string& message);

  // The text of the current progress line (without control characters): for tests and logs.
  std::string render() const;

 public:
  struct State;  // shared with the sink wrappers (defined in progress.cc)

 private:
  void draw_locked(bool force);
  std::string render_locked() const;
  void plain_log_locked(const std::string& line);

  std::shared_ptr<State> state_;
  std::shared_ptr<spdlog::logger> logger_;
  std::vector<std::pair<std::shared_ptr<spdlog::logger>, std::vector<spdlog::sink_ptr>>> attached_;
};

}  // namespace ftune
