// Unknown-key checks for search-file mappings (see config_keys.h).
#include "hpo/config_keys.h"

#include <fmt/format.h>

#include "core/error.h"

namespace ftune::hpo {

void check_section_keys(const YAML::Node& cfg, const std::string& where,
                        const std::set<std::string>& keys, const std::string& what) {
  for (const auto& kv : cfg) {
    const std::string key = kv.first.as<std::string>();
    if (keys.count(key)) continue;
    std::string list;
    for (const auto& k : keys) list += (list.empty() ? "" : ", ") + k;
    throw InputError(
        fmt::format("{}.{}: unknown key for {} (expected {})", where, key, what, list));
  }
}

}  // namespace ftune::hpo
