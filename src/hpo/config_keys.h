// Unknown-key checks for the mappings of a search file (sampler:, pruner:, ...): a key that the
// component does not take is an InputError naming where it is and listing the keys it takes.
#pragma once

#include <set>
#include <string>

#include <yaml-cpp/yaml.h>

namespace ftune::hpo {

// `what` names the component in the message, e.g. "sampler 'tpe'".
void check_section_keys(const YAML::Node& cfg, const std::string& where,
                        const std::set<std::string>& keys, const std::string& what);

}  // namespace ftune::hpo
