// Command-line value checks (see arguments.h).
#include "cli/arguments.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>

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

}  // namespace

CLI::Validator positive_integer() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        long long v = 0;
        if (parse_integer(value, &v) && v >= 1) return "";
        return fmt::format("must be a positive integer, got '{}'", value);
      },
      "POSITIVE", "positive integer");
}

CLI::Validator non_negative_integer() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        long long v = 0;
        if (parse_integer(value, &v) && v >= 0) return "";
        return fmt::format("must be an integer >= 0 (0: all cores), got '{}'", value);
      },
      "NON-NEGATIVE", "non-negative integer");
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
