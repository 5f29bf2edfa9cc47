// Page assembly (html_page.h): the stylesheet and script come from src/report/assets/, compiled
// in by CMake as the generated header report/assets.h.
#include "report/html_page.h"

#include "report/assets.h"
#include "report/svg_chart.h"

namespace ftune::report {

std::string render_section(const Section& section) {
  return "<section id=\"" + escape_html(section.id) + "\"><h2>" + escape_html(section.title) +
         "</h2>" + section.html + "</section>\n";
}

std::string render_page(const Page& page) {
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      "<meta name=\"generator\" content=\"ftune\"><title>" +
      escape_html(page.title) + "</title><style>\n";
  out += assets::report_css;
  out += "</style></head>\n<body";
  if (!page.live_api.empty())
    out += " data-api=\"" + escape_html(page.live_api) + "\" data-poll-ms=\"" +
           std::to_string(page.poll_ms) + "\"";
  out += "><header><h1>" + escape_html(page.title) + "</h1><p id=\"subtitle\">" +
         escape_html(page.subtitle) + "</p></header>\n<nav>";
  for (const Section& s : page.sections)
    out += "<a href=\"#" + escape_html(s.id) + "\">" + escape_html(s.title) + "</a>";
  out += "</nav>\n";
  if (!page.live_api.empty() || !page.error.empty())
    out += std::string("<div id=\"live-error\" class=\"error\"") +
           (page.error.empty() ? " hidden" : "") + ">" + escape_html(page.error) + "</div>\n";
  out += "<main>\n";
  for (const Section& s : page.sections) out += render_section(s);
  out += "</main>\n<script>\n";
  out += assets::report_js;
  if (!page.live_api.empty()) out += assets::live_js;
  out += "</script>\n";
  return out + "</body></html>\n";
}

std::string missing_note(const std::string& what) {
  return "<p class=\"missing\">not recorded: " + escape_html(what) + "</p>";
}

std::string key_value_table(const std::vector<std::pair<std::string, std::string>>& rows) {
  std::string out = "<table class=\"kv\">";
  for (const auto& [k, v] : rows)
    out += "<tr><td>" + escape_html(k) + "</td><td>" + escape_html(v) + "</td></tr>";
  return out + "</table>";
}

}  // namespace ftune::report
