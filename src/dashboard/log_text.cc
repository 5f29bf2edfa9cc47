// Escaping request text for the log (log_text.h).
#include "dashboard/log_text.h"

#include <fmt/format.h>

namespace ftune::dashboard {

std::string log_text(std::string_view text, size_t max_bytes) {
  std::string out;
  const size_t n = std::min(text.size(), max_bytes);
  out.reserve(n + 16);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c >= 0x7f || c == '\\')
      out += fmt::format("\\x{:02x}", c);
    else
      out += static_cast<char>(c);
  }
  if (text.size() > n) out += fmt::format("...({} more bytes)", text.size() - n);
  return out;
}

}  // namespace ftune::dashboard
