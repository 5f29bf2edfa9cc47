// Command-line value checks (see arguments.h).
#include "cli/arguments.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace ftune::cli {
namespace {

// The whole of `text` as an integer, or false.
bool parse_integer(const std::string& text, long long* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *out = std::strtoll(text.c_str(), &end, 10);
  return errno == 0 && *end == '\0';
}

// Integers >= `min`; a refusal says "must be <expected>, got '<value>'".
CLI::Validator integer_at_least(long long min, const std::string& expected, const std::string& name,
                                const std::string& description) {
  return CLI::Validator(
      [min, expected](std::string& value) -> std::string {
        long long v = 0;
        if (parse_integer(value, &v) && v >= min) return "";
        return fmt::format("must be {}, got '{}'", expected, value);
      },
      name, description);
}

}  // namespace

CLI::Validator positive_integer() {
  return integer_at_least(1, "a positive integer", "POSITIVE", "positive integer");
}

CLI::Validator non_negative_integer() {
  return integer_at_least(0, "an integer >= 0 (0: all cores)", "NON-NEGATIVE",
                          "non-negative integer");
}

CLI::Validator open_probability() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (!value.empty() && *end == '\0' && v > 0 && v < 1) return "";
        return fmt::format("must be a probability strictly between 0 and 1, got '{}'", value);
      },
      "(0,1)", "probability");
}

}  // namespace ftune::cli
