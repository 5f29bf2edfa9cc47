// The dashboard's pages and section feeds (live_views.h).
#include "dashboard/live_views.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <deque>
#include <map>
#include <mutex>

#include "core/error.h"
#include "dashboard/log_text.h"
#include "report/study_data.h"
#include "report/run_view.h"
#include "report/study_view.h"
#include "report/svg_chart.h"

namespace ftune::dashboard {

struct Views::State {
  // Views whose last error is remembered (to log each change once); past it the oldest entry is
  // forgotten, so requests for ever new study names cannot grow the process.
  static constexpr size_t kMaxViews = 256;

  std::string storage;
  std::vector<std::string> runs;
  int poll_ms = 2000;
  std::mutex mutex;
  std::map<std::string, std::string> last_error;  // view -> its last error ("" = fine)
  std::deque<std::string> order;                  // views in last_error, oldest first

  // Logs `error` for `view` when it differs from the last one seen; logs recovery once. Both are
  // request text: logged escaped and cut (log_text.h).
  void note(const std::string& view, const std::string& error) {
    std::lock_guard lock(mutex);
    auto it = last_error.find(view);
    if (it == last_error.end()) {
      if (error.empty()) return;  // never failed: nothing to remember
      if (order.size() >= kMaxViews) {
        last_error.erase(order.front());
        order.pop_front();
      }
      it = last_error.emplace(view, "").first;
      order.push_back(view);
    }
    std::string& last = it->second;
    if (last == error) return;
    if (error.empty())
      spdlog::info("dashboard: {} can be read again", log_text(view));
    else
      spdlog::error("dashboard: {}: {}", log_text(view), log_text(error, 400));
    last = error;
  }
  size_t remembered() {
    std::lock_guard lock(mutex);
    return last_error.size();
  }
};

namespace {

using report::escape_html;

// How long a view waits for a study database another process keeps locked before it shows the
// error (the page reads again at its next refresh).
constexpr double kBusyWaitS = 1.0;

// Percent-encoding of a query value (RFC 3986: unreserved characters stay).
std::string url_encode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~')
      out += static_cast<char>(c);
    else
      out += fmt::format("%{:02X}", c);
  }
  return out;
}

// The study or run a request names; nullopt with `error` set when it names none.
std::optional<size_t> run_index(const std::string& id, size_t n, std::string& error) {
  size_t pos = 0;
  unsigned long v = 0;
  try {
    v = std::stoul(id, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (id.empty() || pos != id.size() || v >= n) {
    error = fmt::format("no run {} (the dashboard serves runs 0 to {})", id.substr(0, 40),
                        static_cast<long>(n) - 1);
    return std::nullopt;
  }
  return v;
}

// Reads a view; an ftune error (a locked or malformed database, a bad run directory) is returned
// as text, anything else too (the dashboard keeps serving).
template <class F>
std::string guarded(F&& read) {
  try {
    read();
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

nlohmann::json sections_json(const report::Page& page) {
  nlohmann::json sections = nlohmann::json::array();
  for (const report::Section& s : page.sections)
    sections.push_back({{"id", s.id}, {"html", report::render_section(s)}});
  return {{"subtitle", page.subtitle}, {"sections", sections}, {"error", ""}};
}

}  // namespace

Views::Views(std::string storage, std::vector<std::string> runs, int poll_ms)
    : state_(std::make_shared<State>()) {
  state_->storage = std::move(storage);
  state_->runs = std::move(runs);
  state_->poll_ms = poll_ms;
}

std::string Views::index_page() const {
  report::Page page;
  page.title = "ftune dashboard";
  page.subtitle = "studies and runs; each page updates itself";
  if (!state_->storage.empty()) {
    std::string html;
    const std::string error = guarded([&] {
      html = "<ul id=\"studies\">";
      for (const std::string& name : report::study_names(state_->storage, kBusyWaitS))
        html += fmt::format("<li><a href=\"/study?name={0}\">{1}</a></li>", url_encode(name),
                            escape_html(name));
      html += "</ul>";
    });
    state_->note("storage " + state_->storage, error);
    page.sections.push_back(
        {"index-studies", "Studies in " + state_->storage,
         error.empty() ? html : "<p class=\"error\">" + escape_html(error) + "</p>"});
  }
  if (!state_->runs.empty()) {
    std::string html = "<ul id=\"runs\">";
    for (size_t i = 0; i < state_->runs.size(); ++i)
      html += fmt::format("<li><a href=\"/run?id={}\">{}</a></li>", i,
                          escape_html(state_->runs[i]));
    page.sections.push_back({"index-runs", "Runs", html + "</ul>"});
  }
  return report::render_page(page);
}

ViewResult Views::study_page(const std::string& name) const {
  report::Page page;
  page.title = "ftune study: " + name;
  page.live_api = "/api/study?name=" + url_encode(name);
  page.poll_ms = state_->poll_ms;
  if (state_->storage.empty()) {
    page.error = "the dashboard was started without --storage";
    return {404, report::render_page(page)};
  }
  const std::string error = guarded([&] {
    const std::string live_api = page.live_api;
    page = report::study_page(report::read_study(state_->storage, name, kBusyWaitS));
    page.live_api = live_api;
    page.poll_ms = state_->poll_ms;
  });
  state_->note("study '" + name + "' in " + state_->storage, error);
  page.error = error;
  return {200, report::render_page(page)};
}

ViewResult Views::run_page(const std::string& id) const {
  report::Page page;
  std::string error;
  const auto i = run_index(id, state_->runs.size(), error);
  page.title = "ftune run";
  if (!i) {
    page.error = error;
    return {404, report::render_page(page)};
  }
  page.live_api = fmt::format("/api/run?id={}", *i);
  page.poll_ms = state_->poll_ms;
  error = guarded([&] {
    const std::string live_api = page.live_api;
    page = report::run_page(report::read_run_dir(state_->runs[*i]));
    page.live_api = live_api;
    page.poll_ms = state_->poll_ms;
  });
  state_->note("run " + state_->runs[*i], error);
  page.error = error;
  return {200, report::render_page(page)};
}

nlohmann::json Views::study_sections(const std::string& name) const {
  if (state_->storage.empty())
    return {{"error", "the dashboard was started without --storage"}, {"sections", nlohmann::json::array()}};
  nlohmann::json out;
  const std::string error = guarded(
      [&] { out = sections_json(report::study_page(report::read_study(state_->storage, name, kBusyWaitS))); });
  state_->note("study '" + name + "' in " + state_->storage, error);
  if (!error.empty()) return {{"error", error}, {"sections", nlohmann::json::array()}};
  return out;
}

nlohmann::json Views::run_sections(const std::string& id) const {
  std::string error;
  const auto i = run_index(id, state_->runs.size(), error);
  if (!i) return {{"error", error}, {"sections", nlohmann::json::array()}};
  nlohmann::json out;
  error = guarded([&] { out = sections_json(report::run_page(report::read_run_dir(state_->runs[*i]))); });
  state_->note("run " + state_->runs[*i], error);
  if (!error.empty()) return {{"error", error}, {"sections", nlohmann::json::array()}};
  return out;
}

size_t Views::remembered_views() const { return state_->remembered(); }

}  // namespace ftune::dashboard
