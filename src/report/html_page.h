// One HTML page of views (a run's or a study's): header, a section per view, the stylesheet and
// the table script inlined from src/report/assets/ (embedded at build time), so the file opens
// anywhere with no network. The dashboard serves the same page with its live-update script.
#pragma once

#include <string>
#include <vector>

namespace ftune::report {

struct Section {
  std::string id;     // element id (the dashboard replaces sections by id when it polls)
  std::string title;
  std::string html;   // the body
};

struct Page {
  std::string title;     // <title> and the header
  std::string subtitle;  // a line under it: what was read, when
  std::vector<Section> sections;
  std::string error;     // shown in a red banner above the sections (e.g. the storage is locked)
  // The dashboard: the JSON endpoint the page polls for fresh sections (assets/live.js), and how
  // often. Empty: a static page (the report file).
  std::string live_api;
  int poll_ms = 2000;
};

// The whole document.
std::string render_page(const Page& page);
// One <section> (what the dashboard sends back when it refreshes a view).
std::string render_section(const Section& section);

// Small building blocks of sections.
std::string missing_note(const std::string& what);  // <p class="missing">not recorded: ...</p>
std::string key_value_table(const std::vector<std::pair<std::string, std::string>>& rows);

}  // namespace ftune::report
