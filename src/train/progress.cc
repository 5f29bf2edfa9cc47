// Progress line rendering, redraw throttling and the spdlog sink wrapper that keeps log lines and
// the bar apart.
#include "train/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/sinks/sink.h>

namespace ftune {

struct ProgressBar::State {
  std::mutex mu;
  std::ostream* out;
  ProgressOptions opt;
  Clock clock;
  bool visible = false;  // a bar line is on the terminal now
  std::string shown;     // its text
  double last_draw = -std::numeric_limits<double>::infinity();

  int64_t total_steps = 0, epochs = 0;
  TrainProgress progress;
  bool training = false;
  double train_start = 0, eval_seconds = 0;  // eval time is left out of training rates
  int64_t last_logged_step = -1;

  std::function<std::string()> status;  // set_status()

  bool in_eval = false;
  std::string eval_name;
  int64_t eval_total = 0, eval_done = 0, eval_rows = 0, last_logged_eval = -1;
  double eval_start = 0;

  void clear() {
    if (!visible) return;
    *out << "\r\033[K" << std::flush;
    visible = false;
  }
  void show(const std::string& line) {
    *out << '\r' << line << "\033[K" << std::flush;
    shown = line;
    visible = true;
  }
};

namespace {

// Forwards to the wrapped sink, clearing the bar before each line and drawing it again after.
class BarClearingSink : public spdlog::sinks::sink {
 public:
  BarClearingSink(std::shared_ptr<ProgressBar::State> state, spdlog::sink_ptr inner)
      : state_(std::move(state)), inner_(std::move(inner)) {}

  void log(const spdlog::details::log_msg& msg) override {
    if (!inner_->should_log(msg.level)) return;
    std::lock_guard<std::mutex> lock(state_->mu);
    const bool was_visible = state_->visible;
    state_->clear();
    inner_->log(msg);
    inner_->flush();
    if (was_visible) state_->show(state_->shown);
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> f) override {
    inner_->set_formatter(std::move(f));
  }

 private:
  std::shared_ptr<ProgressBar::State> state_;
  spdlog::sink_ptr inner_;
};

std::string bar(double fraction, int width) {
  if (!(fraction >= 0)) fraction = 0;
  if (fraction > 1) fraction = 1;
  const int filled = static_cast<int>(std::floor(fraction * width));
  std::string s = "[" + std::string(filled, '=');
  if (filled < width) s += '>' + std::string(width - filled - 1, ' ');
  return s + "]";
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<int64_t>(std::llround(seconds));
  const int64_t h = total / 3600, m = (total / 60) % 60, s = total % 60;
  return h ? fmt::format("{}:{:02d}:{:02d}", h, m, s) : fmt::format("{:02d}:{:02d}", m, s);
}

std::string format_rate(double v) {
  if (!std::isfinite(v) || v < 0) return "?";
  static const char* kSuffix[] = {"", "k", "M", "G"};
  int i = 0;
  while (v >= 999.5 && i < 3) {
    v /= 1000;
    ++i;
  }
  const int decimals = v >= 99.95 ? 0 : v >= 9.995 ? 1 : 2;
  std::string s = fmt::format("{:.{}f}", v, i == 0 && v >= 99.95 ? 0 : decimals);
  return s + kSuffix[i];
}

ProgressBar::ProgressBar(std::ostream& out, std::shared_ptr<spdlog::logger> logger,
                         ProgressOptions options, Clock clock)
    : state_(std::make_shared<State>()), logger_(std::move(logger)) {
  state_->out = &out;
  state_->opt = options;
  state_->clock = std::move(clock);
}

std::unique_ptr<ProgressBar> ProgressBar::for_stderr(int64_t log_every) {
  ProgressOptions opt;
  opt.log_every = log_every;
  opt.terminal = ::isatty(STDERR_FILENO) == 1;
  if (opt.terminal) {
    winsize ws{};
    opt.columns = ::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto bar = std::make_unique<ProgressBar>(std::cerr, spdlog::default_logger(), opt, [t0] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  bar->attach(spdlog::default_logger());
  return bar;
}

ProgressBar::~ProgressBar() {
  for (auto& [logger, sinks] : attached_) logger->sinks() = sinks;
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->visible) *state_->out << '\n' << std::flush;
  state_->visible = false;
}

void ProgressBar::attach(const std::shared_ptr<spdlog::logger>& logger) {
  if (!state_->opt.terminal) return;
  std::vector<spdlog::sink_ptr>& sinks = logger->sinks();
  attached_.emplace_back(logger, sinks);
  for (spdlog::sink_ptr& s : sinks) s = std::make_shared<BarClearingSink>(state_, s);
}

void ProgressBar::begin_training(int64_t total_steps, int64_t epochs) {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& st = *state_;
  st.total_steps = total_steps;
  st.epochs = epochs;
  st.training = true;
  st.progress = TrainProgress{};
  st.train_start = st.clock();
  st.eval_seconds = 0;
  st.last_logged_step = -1;
}

void ProgressBar::update(const TrainProgress& progress) {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& st = *state_;
  st.progress = progress;
  if (st.in_eval) return;
  if (st.opt.terminal) {
    draw_locked(progress.step >= st.total_steps);
  } else if (progress.step != st.last_logged_step &&
             (progress.step % std::max<int64_t>(st.opt.log_every, 1) == 0 ||
              progress.step >= st.total_steps)) {
    st.last_logged_step = progress.step;
    plain_log_locked(render_locked());
  }
}

void ProgressBar::begin_eval(const std::string& name, int64_t total_batches) {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& st = *state_;
  st.in_eval = true;
  st.eval_name = name;
  st.eval_total = total_batches;
  st.eval_done = st.eval_rows = 0;
  st.last_logged_eval = -1;
  st.eval_start = st.clock();
  if (st.opt.terminal) draw_locked(true);
}

void ProgressBar::update_eval(int64_t batches_done, int64_t rows_done) {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& st = *state_;
  st.eval_done = batches_done;
  st.eval_rows = rows_done;
  if (st.opt.terminal) {
    draw_locked(batches_done >= st.eval_total);
  } else if (batches_done != st.last_logged_eval &&
             (batches_done % std::max<int64_t>(st.opt.log_every, 1) == 0 ||
              batches_done >= st.eval_total)) {
    st.last_logged_eval = batches_done;
    plain_log_locked(render_locked());
  }
}

void ProgressBar::end_eval() {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& st = *state_;
  if (!st.in_eval) return;
  st.eval_seconds += st.clock() - st.eval_start;
  st.in_eval = false;
  if (!st.opt.terminal) return;
  if (st.training)
    draw_locked(true);
  else
    st.clear();
}

void ProgressBar::finish() {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& st = *state_;
  if (st.opt.terminal) {
    if (st.training || st.in_eval) draw_locked(true);
    if (st.visible) *st.out << '\n' << std::flush;
    st.visible = false;
  } else if (st.training && st.progress.step != st.last_logged_step) {
    st.last_logged_step = st.progress.step;
    plain_log_locked(render_locked());
  }
  st.training = st.in_eval = false;
}

void ProgressBar::set_status(std::function<std::string()> status) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->status = std::move(status);
}

void ProgressBar::log(spdlog::level::level_enum level, const std::string& message) {
  bool wrapped = false;
  for (const auto& a : attached_) wrapped |= a.first == logger_;
  if (wrapped || !state_->opt.terminal) {
    logger_->log(level, message);
    return;
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  const bool was_visible = state_->visible;
  state_->clear();
  logger_->log(level, message);
  logger_->flush();
  if (was_visible) state_->show(state_->shown);
}

std::string ProgressBar::render() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return render_locked();
}

void ProgressBar::draw_locked(bool force) {
  State& st = *state_;
  const double now = st.clock();
  if (!force && now - st.last_draw < st.opt.min_redraw_seconds) return;
  st.last_draw = now;
  std::string line = render_locked();
  if (st.opt.columns > 1 && int(line.size()) > st.opt.columns - 1) line.resize(st.opt.columns - 1);
  st.show(line);
}

void ProgressBar::plain_log_locked(const std::string& line) {
  logger_->info(line);
}

std::string ProgressBar::render_locked() const {
  const State& st = *state_;
  const double now = st.clock();
  const bool terminal = st.opt.terminal;
  if (st.in_eval) {
    const double seconds = now - st.eval_start;
    const double rate = seconds > 0 ? double(st.eval_rows) / seconds : NAN;
    const double eta = st.eval_done > 0 && seconds > 0
                           ? double(st.eval_total - st.eval_done) * seconds / double(st.eval_done)
                           : NAN;
    const double frac = st.eval_total > 0 ? double(st.eval_done) / double(st.eval_total) : 0;
    return fmt::format("{}{} {}/{} batches  {} rows/s  elapsed {}  eta {}",
                       terminal ? fmt::format("{:<5} ", st.eval_name) : st.eval_name + ":",
                       terminal ? bar(frac, st.opt.bar_width) : fmt::format(" {:.0f}%", 100 * frac),
                       st.eval_done, st.eval_total, format_rate(rate), format_duration(seconds),
                       format_duration(eta));
  }
  const TrainProgress& p = st.progress;
  const double seconds = now - st.train_start - st.eval_seconds;
  const double sps = seconds > 0 ? double(p.samples) / seconds : NAN;
  const double tps = seconds > 0 ? double(p.tokens) / seconds : NAN;
  const double eta =
      p.step > 0 && seconds > 0 ? double(st.total_steps - p.step) * seconds / double(p.step) : NAN;
  const double frac = st.total_steps > 0 ? double(p.step) / double(st.total_steps) : 0;
  std::string line = fmt::format(
      "{} {}/{}  epoch {}/{}  loss {:.4f}  {} samples/s  {} tokens/s  elapsed {}  eta {}",
      terminal ? "train " + bar(frac, st.opt.bar_width) : fmt::format("step {:.0f}%", 100 * frac),
      p.step, st.total_steps, p.epoch, st.epochs, p.loss, format_rate(sps), format_rate(tps),
      format_duration(seconds), format_duration(eta));
  if (p.padding >= 0) line += fmt::format("  pad {:.1f}%", 100.0 * p.padding);
  if (st.status) {
    const std::string extra = st.status();
    if (!extra.empty()) line += "  " + extra;
  }
  return line;
}

}  // namespace ftune
