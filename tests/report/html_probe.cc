// The report tests' page readers (html_probe.h).
#include "html_probe.h"

#include <regex>

namespace ftune::report::test_html {

std::string figure(const std::string& html, const std::string& id) {
  const size_t at = html.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  const size_t begin = html.rfind("<figure", at);
  return html.substr(begin, html.find("</figure>", at) - begin);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

int declared_points(const std::string& fig) {
  std::smatch m;
  if (!std::regex_search(fig, m, std::regex("data-points=\"([0-9]+)\""))) return -1;
  return std::stoi(m[1]);
}

}  // namespace ftune::report::test_html
