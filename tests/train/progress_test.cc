// Progress bar rendering on a fake terminal (a string stream) with a hand-driven clock: exact
// line text, redraw throttling, evaluation lines, eval time left out of training rates, log lines
// that clear the bar and redraw it below, width cut, and plain log lines when not on a terminal.
#include "train/progress.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include <spdlog/sinks/ostream_sink.h>

namespace ftune {
namespace {

const std::string kClear = "\r\033[K";

std::shared_ptr<spdlog::logger> string_logger(std::ostream& os) {
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(os, /*force_flush=*/true);
  auto logger = std::make_shared<spdlog::logger>("progress_test", sink);
  logger->set_pattern("%v");
  return logger;
}

struct FakeTerminal {
  std::ostringstream screen;
  double now = 0;
  std::shared_ptr<spdlog::logger> logger = string_logger(screen);

  ProgressBar make(ProgressOptions opt) {
    return ProgressBar(screen, logger, opt, [this] { return now; });
  }
  std::string take() {
    std::string s = screen.str();
    screen.str("");
    return s;
  }
};

ProgressOptions terminal_options() {
  ProgressOptions opt;
  opt.terminal = true;
  opt.bar_width = 10;
  return opt;
}

TEST(ProgressFormat, DurationsAndRates) {
  EXPECT_EQ(format_duration(0), "00:00");
  EXPECT_EQ(format_duration(83.4), "01:23");
  EXPECT_EQ(format_duration(3600 + 62), "1:01:02");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_rate(80), "80.0");
  EXPECT_EQ(format_rate(412.3), "412");
  EXPECT_EQ(format_rate(2000), "2.00k");
  EXPECT_EQ(format_rate(41234), "41.2k");
  EXPECT_EQ(format_rate(1.234e6), "1.23M");
  EXPECT_EQ(format_rate(5.5), "5.50");
  EXPECT_EQ(format_rate(NAN), "?");
}

TEST(ProgressBarTerminal, RendersThrottlesAndExcludesEvalTime) {
  FakeTerminal term;
  ProgressBar bar = term.make(terminal_options());
  bar.begin_training(100, 2);
  term.now = 10;
  bar.update({25, 1, 0.5, 800, 20000});
  const std::string line25 =
      "train [==>       ] 25/100  epoch 1/2  loss 0.5000  80.0 samples/s  2.00k tokens/s  "
      "elapsed 00:10  eta 00:30";
  EXPECT_EQ(term.take(), "\r" + line25 + "\033[K");

  term.now = 10.05;  // within 0.1 s of the last redraw: nothing drawn
  bar.update({26, 1, 0.5, 832, 20800});
  EXPECT_EQ(term.take(), "");
  term.now = 10.2;
  bar.update({27, 1, 0.5, 864, 21600});
  EXPECT_NE(term.take().find(" 27/100 "), std::string::npos);

  // Evaluation: its own line, then 5 s of it are left out of the training rates.
  term.now = 20;
  bar.begin_eval("eval", 40);
  term.take();
  term.now = 22;
  bar.update_eval(10, 320);
  EXPECT_EQ(term.take(),
            "\reval  [==>       ] 10/40 batches  160 rows/s  elapsed 00:02  "
            "eta 00:06\033[K");
  term.now = 25;
  bar.end_eval();
  // Back to the training line: 27 steps, 864 rows and 21600 tokens in 25 - 5 = 20 s of training:
  // 43.2 rows/s, 1.08k tokens/s, 73 steps left -> 54 s.
  EXPECT_EQ(term.take(),
            "\rtrain [==>       ] 27/100  epoch 1/2  loss 0.5000  43.2 samples/s  "
            "1.08k tokens/s  elapsed 00:20  eta 00:54\033[K");

  // The last step is always drawn, and finish() ends the line.
  term.now = 25.01;
  bar.update({100, 2, 0.125, 3200, 80000});
  bar.finish();
  const std::string end = term.take();
  EXPECT_NE(end.find("[==========] 100/100"), std::string::npos) << end;
  EXPECT_EQ(end.back(), '\n');
}

TEST(ProgressBarTerminal, StatusTextIsAppendedToTheTrainingLineOnly) {
  FakeTerminal term;
  ProgressBar bar = term.make(terminal_options());
  std::string gpu;  // what the GPU sampler would say; empty before its first sample
  bar.set_status([&gpu] { return gpu; });
  bar.begin_training(100, 2);
  term.now = 10;
  bar.update({25, 1, 0.5, 800, 20000});
  const std::string line25 =
      "train [==>       ] 25/100  epoch 1/2  loss 0.5000  80.0 samples/s  2.00k tokens/s  "
      "elapsed 00:10  eta 00:30";
  EXPECT_EQ(bar.render(), line25);
  gpu = "gpu 97% 41.2/79.6 GiB";
  EXPECT_EQ(bar.render(), line25 + "  gpu 97% 41.2/79.6 GiB");
  bar.begin_eval("eval", 40);
  EXPECT_EQ(bar.render().find("gpu"), std::string::npos) << bar.render();
  bar.end_eval();
  bar.set_status(nullptr);
  EXPECT_EQ(bar.render().find("gpu"), std::string::npos) << bar.render();
}

TEST(ProgressBarTerminal, LogLinesClearTheBarAndRedrawIt) {
  FakeTerminal term;
  ProgressBar bar = term.make(terminal_options());
  bar.attach(term.logger);
  bar.begin_training(10, 1);
  term.now = 1;
  bar.update({1, 1, 2.0, 8, 100});
  const std::string drawn = term.take();
  const std::string line = drawn.substr(1, drawn.size() - 1 - 3);  // without '\r' and "\033[K"
  // Any spdlog line through the attached logger, and bar.log(), land on a line of their own.
  term.logger->warn("step 1: loss spike");
  EXPECT_EQ(term.take(), kClear + "step 1: loss spike\n" + "\r" + line + "\033[K");
  bar.log(spdlog::level::info, "saved checkpoint");
  EXPECT_EQ(term.take(), kClear + "saved checkpoint\n" + "\r" + line + "\033[K");
  // Levels below the sink's are dropped without touching the bar.
  term.logger->debug("hidden");
  EXPECT_EQ(term.take(), "");
}

TEST(ProgressBarTerminal, UnattachedLoggerIsStillKeptApartAndWidthIsCut) {
  FakeTerminal term;
  ProgressOptions opt = terminal_options();
  opt.columns = 30;
  ProgressBar bar = term.make(opt);
  bar.begin_training(10, 1);
  term.now = 1;
  bar.update({1, 1, 2.0, 8, 100});
  const std::string drawn = term.take();
  EXPECT_EQ(drawn, "\rtrain [=>        ] 1/10  epoc\033[K");  // 29 visible characters
  bar.log(spdlog::level::info, "hello");
  EXPECT_EQ(term.take(), kClear + "hello\n" + drawn);
}

TEST(ProgressBarTerminal, DestructorEndsTheLineAndDetaches) {
  FakeTerminal term;
  {
    ProgressBar bar = term.make(terminal_options());
    bar.attach(term.logger);
    bar.begin_training(10, 1);
    bar.update({10, 1, 0.1, 80, 800});
    term.take();
  }
  EXPECT_EQ(term.take(), "\n");
  term.logger->info("after");
  EXPECT_EQ(term.take(), "after\n");  // the sink is unwrapped again
}

TEST(ProgressBarPlain, LogsEveryNStepsAndTheLast) {
  std::ostringstream screen, log;
  double now = 0;
  ProgressOptions opt;
  opt.log_every = 10;
  ProgressBar bar(screen, string_logger(log), opt, [&] { return now; });
  bar.attach(string_logger(log));  // no effect off a terminal
  bar.begin_training(25, 1);
  for (int64_t s = 1; s <= 24; ++s) {
    now = s;
    bar.update({s, 1, 1.0 / double(s), 4 * s, 100 * s});
  }
  bar.finish();
  EXPECT_EQ(screen.str(), "");  // no control characters in a log
  EXPECT_EQ(log.str(),
            "step 40% 10/25  epoch 1/1  loss 0.1000  4.00 samples/s  100 tokens/s  elapsed 00:10  "
            "eta 00:15\n"
            "step 80% 20/25  epoch 1/1  loss 0.0500  4.00 samples/s  100 tokens/s  elapsed 00:20  "
            "eta 00:05\n"
            "step 96% 24/25  epoch 1/1  loss 0.0417  4.00 samples/s  100 tokens/s  elapsed 00:24  "
            "eta 00:01\n");
  log.str("");
  bar.begin_eval("test", 3);
  now = 26;
  bar.update_eval(1, 50);
  bar.update_eval(3, 150);
  bar.end_eval();
  EXPECT_EQ(log.str(), "test: 100% 3/3 batches  75.0 rows/s  elapsed 00:02  eta 00:00\n");
}

// Runs `body` with file descriptor 2 (stderr) pointing at `fd`, then restores it.
template <typename F>
void with_stderr_on(int fd, F&& body) {
  std::cerr.flush();
  const int saved = ::dup(2);
  ASSERT_GE(saved, 0);
  ::dup2(fd, 2);
  body();
  std::cerr.flush();
  ::dup2(saved, 2);
  ::close(saved);
}

TEST(ProgressBarStderr, DrawsOnARealTerminalCutToItsWidth) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  const int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
  ASSERT_GE(slave, 0);
  winsize ws{};
  ws.ws_row = 24;
  ws.ws_col = 50;
  ASSERT_EQ(::ioctl(slave, TIOCSWINSZ, &ws), 0);
  with_stderr_on(slave, [] {
    auto bar = ProgressBar::for_stderr(10);
    bar->begin_training(10, 1);
    bar->update({10, 1, 0.5, 80, 800});  // the last step is always drawn
    bar->finish();
  });
  std::string screen;
  char buf[4096];
  while (::poll(std::array<pollfd, 1>{pollfd{master, POLLIN, 0}}.data(), 1, 200) > 0) {
    const ssize_t n = ::read(master, buf, sizeof(buf));
    if (n <= 0) break;
    screen.append(buf, size_t(n));
  }
  ::close(slave);
  ::close(master);
  const size_t start = screen.find("\rtrain ["), end = screen.find("\033[K", start);
  ASSERT_NE(start, std::string::npos) << screen;
  ASSERT_NE(end, std::string::npos) << screen;
  EXPECT_EQ(end - start - 1, 49u) << screen;  // cut to the terminal's 50 columns minus one
}

TEST(ProgressBarStderr, PlainLinesWhenStderrIsNotATerminal) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::string line;
  with_stderr_on(fds[1], [&] {
    auto bar = ProgressBar::for_stderr(10);
    bar->begin_training(10, 1);
    line = bar->render();
  });
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_EQ(line.rfind("step 0% 0/10", 0), 0u) << line;
}

}  // namespace
}  // namespace ftune
