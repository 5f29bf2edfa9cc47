// On/off switches from the environment (see env_flag.h).
#include "core/env_flag.h"

#include <cctype>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace ftune {

bool parse_env_flag(const char* name, const char* value) {
  std::string s = value ? value : "";
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s.empty() || s == "0" || s == "false" || s == "off" || s == "no") return false;
  if (s == "1" || s == "true" || s == "on" || s == "yes") return true;
  throw InputError(std::string("environment variable ") + name + "='" + value +
                   "': expected 1 or 0 (true/false, on/off, yes/no)");
}

bool env_flag(const char* name) {
  return parse_env_flag(name, std::getenv(name));
}

}  // namespace ftune
