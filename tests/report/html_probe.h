// Reading the report pages in the C++ tests: a chart's markup by id, how many marks it holds and
// how many it declares (data-points).
#pragma once

#include <string>

namespace ftune::report::test_html {

// The markup of the <figure> whose element (or a child's) id is `id`, up to its </figure>; ""
// when none.
std::string figure(const std::string& html, const std::string& id);
// Occurrences of `what` in `text`.
size_t count(const std::string& text, const std::string& what);
// The figure's data-points attribute; -1 when it has none.
int declared_points(const std::string& fig);

}  // namespace ftune::report::test_html
