// The DevTools-protocol driver (cdp_browser.h).
#include "cdp_browser.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <thread>

namespace ftune::test {
namespace {

std::string base64_decode(const std::string& in) {
  static const std::string chars =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -8;
  for (unsigned char c : in) {
    const size_t d = chars.find(static_cast<char>(c));
    if (d == std::string::npos) break;  // '=' padding
    val = (val << 6) + static_cast<int>(d);
    bits += 6;
    if (bits >= 0) {
      out += static_cast<char>((val >> bits) & 0xFF);
      bits -= 8;
    }
  }
  return out;
}

}  // namespace

std::string Browser::find_chromium() {
  if (const char* env = std::getenv("FTUNE_CHROMIUM")) return env;
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
    if (access(p, X_OK) == 0) return p;
  return "";
}

Browser::Browser(const std::string& chromium, const std::string& profile_dir) {
  int cmd[2], res[2];
  if (pipe2(cmd, O_CLOEXEC) != 0 || pipe2(res, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe failed");
  const std::string profile = "--user-data-dir=" + profile_dir;  // before fork: no malloc after
  pid_ = fork();
  if (pid_ == 0) {
    // Child: fd 3 reads commands, fd 4 writes responses; output to /dev/null.
    dup2(cmd[0], 3);
    dup2(res[1], 4);
    const int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    execl(chromium.c_str(), chromium.c_str(), "--headless", "--no-sandbox", "--disable-gpu",
          "--remote-debugging-pipe", "--no-first-run", "--hide-scrollbars",
          "--disable-extensions", "--window-size=1280,800", profile.c_str(), "about:blank",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(cmd[0]);
  close(res[1]);
  to_browser_ = cmd[1];
  from_browser_ = res[0];
  if (pid_ < 0) throw std::runtime_error("fork failed");
  const nlohmann::json target =
      call("Target.createTarget", {{"url", "about:blank"}}, /*session=*/false);
  session_ = call("Target.attachToTarget",
                  {{"targetId", target["targetId"]}, {"flatten", true}}, false)["sessionId"];
  call("Page.enable", nlohmann::json::object());
  call("Emulation.setDeviceMetricsOverride",
       {{"width", 1280}, {"height", 800}, {"deviceScaleFactor", 1}, {"mobile", false}});
}

Browser::~Browser() {
  if (to_browser_ >= 0) close(to_browser_);
  if (from_browser_ >= 0) close(from_browser_);
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    for (int i = 0; i < 50; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

nlohmann::json Browser::call(const std::string& method, nlohmann::json params, bool session) {
  const int id = next_id_++;
  nlohmann::json msg = {{"id", id}, {"method", method}, {"params", std::move(params)}};
  if (session) msg["sessionId"] = session_;
  const std::string text = msg.dump() + std::string(1, '\0');
  if (write(to_browser_, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    throw std::runtime_error("chromium: write to the DevTools pipe failed (" + method + ")");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (true) {
    size_t nul;
    while ((nul = buffer_.find('\0')) != std::string::npos) {
      const nlohmann::json reply = nlohmann::json::parse(buffer_.substr(0, nul));
      buffer_.erase(0, nul + 1);
      if (!reply.contains("id") || reply["id"] != id) continue;  // events, other replies
      if (reply.contains("error"))
        throw std::runtime_error("chromium: " + method + ": " + reply["error"].dump());
      return reply["result"];
    }
    pollfd p{from_browser_, POLLIN, 0};
    if (std::chrono::steady_clock::now() > deadline || poll(&p, 1, 1000) < 0)
      throw std::runtime_error("chromium: no answer to " + method);
    if (!(p.revents & (POLLIN | POLLHUP))) continue;
    char buf[65536];
    const ssize_t n = read(from_browser_, buf, sizeof buf);
    if (n <= 0) throw std::runtime_error("chromium: the DevTools pipe closed during " + method);
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

void Browser::navigate(const std::string& url) {
  call("Page.navigate", {{"url", url}});
  if (!wait_for("document.readyState === 'complete' && location.href !== 'about:blank'", 30))
    throw std::runtime_error("chromium: " + url + " did not load");
}

nlohmann::json Browser::eval(const std::string& expression) {
  const nlohmann::json r =
      call("Runtime.evaluate", {{"expression", expression}, {"returnByValue", true}});
  if (r.contains("exceptionDetails"))
    throw std::runtime_error("JavaScript: " + expression + ": " + r["exceptionDetails"].dump());
  return r["result"].value("value", nlohmann::json());
}

bool Browser::wait_for(const std::string& expression, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (eval("!!(" + expression + ")") == true) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

std::string Browser::screenshot_png() {
  return base64_decode(call("Page.captureScreenshot", {{"format", "png"}})["data"]);
}

}  // namespace ftune::test
