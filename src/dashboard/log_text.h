// Text from a request (a study name, a path) made safe for the dashboard's log: control bytes
// (newlines, ESC of ANSI sequences), backslashes and bytes outside ASCII are written as \xNN, so a
// request cannot forge a log line or colour a terminal, and the result is cut to a length.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ftune::dashboard {

// `text` escaped as above; past `max_bytes` of input the rest is replaced by "...(N more bytes)".
std::string log_text(std::string_view text, size_t max_bytes = 120);

}  // namespace ftune::dashboard
