// Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON
// messages separated by NUL on fds 3 and 4), for the dashboard's browser tests: open a page, run
// JavaScript in it, take a screenshot. No WebDriver, no Python: Debian's `chromium` alone.
#pragma once

#include <sys/types.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace ftune::test {

class Browser {
 public:
  // The chromium executable, or "" when none is installed.
  static std::string find_chromium();
  // Starts it headless with a 1280x800 viewport (InternalError-free: throws std::runtime_error
  // with the reason when it cannot start).
  explicit Browser(const std::string& chromium, const std::string& profile_dir);
  ~Browser();

  void navigate(const std::string& url);  // and waits for the load to complete
  // The value of a JavaScript expression (returnByValue); throws on a JavaScript exception.
  nlohmann::json eval(const std::string& expression);
  // Polls `expression` until it is true, up to `seconds`; false on timeout.
  bool wait_for(const std::string& expression, double seconds);
  // A PNG of the viewport.
  std::string screenshot_png();

 private:
  nlohmann::json call(const std::string& method, nlohmann::json params, bool session = true);
  pid_t pid_ = -1;
  int to_browser_ = -1, from_browser_ = -1;
  int next_id_ = 1;
  std::string session_;
  std::string buffer_;
};

}  // namespace ftune::test
