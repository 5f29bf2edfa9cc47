// Adapter configuration: YAML validation and PEFT's module-name matching (see adapter_config.h).
#include "models/adapter_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <set>

#include "core/error.h"
#include "text/regex.h"

namespace ftune {
namespace {

// The linear modules of one encoder layer, as PEFT names them after the layer prefix.
const std::vector<std::string>& layer_linear_suffixes() {
  static const std::vector<std::string> s = {"attention.self.query", "attention.self.key",
                                             "attention.self.value", "attention.output.dense",
                                             "intermediate.dense",   "output.dense"};
  return s;
}

std::string expand_alias(const std::string& pattern) {
  if (pattern == "intermediate") return "intermediate.dense";
  if (pattern == "attention.output") return "attention.output.dense";
  return pattern;
}

// PEFT matches a single-string target_modules with Python's re.fullmatch. The pattern may come
// from a downloaded adapter_config.json, so it runs on PCRE2 (text/regex.h) anchored at both ends,
// whose match limit stops a pattern such as "(.*)*x" that std::regex backtracked on for ever.
text::Regex compile_module_regex(const std::string& pattern, const std::string& where) {
  return text::Regex("\\A(?:" + pattern + ")\\z", where);
}

bool regex_full_match(const text::Regex& re, const std::string& name, const std::string& where) {
  std::vector<text::Match> matches;
  try {
    re.find_all(name, matches);
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {  // PCRE2's match limit
    throw InputError(
        fmt::format("{}: regex cannot be matched against '{}': {}", where, name, e.what()));
  }
  return !matches.empty();
}

bool suffix_match(const std::string& name, const std::string& pattern) {
  const std::string p = expand_alias(pattern);
  return name == p || (name.size() > p.size() && name.ends_with("." + p));
}

// Module names of both families up to 128 layers, for validating patterns (which may name a
// layer) before a model exists.
std::vector<std::string> example_modules() {
  std::vector<std::string> out;
  for (const char* prefix : {"bert", "roberta"})
    for (int layer = 0; layer < 128; ++layer)
      for (const std::string& s : layer_linear_suffixes())
        out.push_back(fmt::format("{}.encoder.layer.{}.{}", prefix, layer, s));
  return out;
}

template <typename T>
T read_scalar(const YAML::Node& n, const std::string& where, const char* expected) {
  if (!n.IsScalar()) throw InputError(fmt::format("{} must be {}", where, expected));
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    throw InputError(fmt::format("{} must be {}, got '{}'", where, expected, n.Scalar()));
  }
}

std::vector<std::string> read_names(const YAML::Node& n, const std::string& where) {
  if (n.IsScalar()) return {n.Scalar()};
  if (!n.IsSequence()) throw InputError(fmt::format("{} must be a list of module names", where));
  std::vector<std::string> out;
  for (const auto& item : n) out.push_back(read_scalar<std::string>(item, where, "a module name"));
  return out;
}

PeftMethod parse_method(const std::string& s, const std::string& where) {
  if (s == "none") return PeftMethod::None;
  if (s == "lora") return PeftMethod::Lora;
  if (s == "dora") return PeftMethod::Dora;
  throw InputError(fmt::format("{} must be none, lora or dora, got '{}'", where, s));
}

}  // namespace

const char* peft_method_name(PeftMethod m) {
  switch (m) {
    case PeftMethod::None:
      return "none";
    case PeftMethod::Lora:
      return "lora";
    case PeftMethod::Dora:
      return "dora";
  }
  return "?";
}

float AdapterConfig::scaling() const {
  return static_cast<float>(use_rslora ? alpha / std::sqrt(static_cast<double>(r))
                                       : alpha / static_cast<double>(r));
}

bool AdapterConfig::trains_pooler() const {
  return std::find(modules_to_save.begin(), modules_to_save.end(), "pooler") !=
         modules_to_save.end();
}

bool AdapterConfig::targets(const std::string& name) const {
  if (!target_regex.empty())
    return regex_full_match(compile_module_regex(target_regex, "target_modules"), name,
                            "target_modules");
  for (const std::string& p : target_modules) {
    if (p == "all-linear") {
      for (const std::string& s : layer_linear_suffixes())
        if (suffix_match(name, s)) return true;
    } else if (suffix_match(name, p)) {
      return true;
    }
  }
  return false;
}

void validate_module_regex(const std::string& pattern, const std::string& where) {
  (void)compile_module_regex(pattern, where);
}

AdapterConfig parse_adapter_config(const YAML::Node& section, const std::string& where) {
  AdapterConfig c;
  if (!section.IsDefined() || section.IsNull()) return c;
  if (section.IsScalar()) {
    c.method = parse_method(section.Scalar(), where);
    return c;
  }
  if (!section.IsMap())
    throw InputError(
        fmt::format("{} must be a mapping (method, r, alpha, dropout, "
                    "target_modules, use_rslora, modules_to_save)",
                    where));
  static const std::set<std::string> known = {
      "method", "r", "alpha", "dropout", "target_modules", "use_rslora", "modules_to_save"};
  for (const auto& kv : section) {
    const std::string key = kv.first.as<std::string>();
    if (!known.count(key))
      throw InputError(
          fmt::format("{}: unknown key '{}' (expected one of method, r, alpha, "
                      "dropout, target_modules, use_rslora, modules_to_save)",
                      where, key));
  }
  const auto at = [&](const char* key) { return fmt::format("{}.{}", where, key); };
  if (section["method"])
    c.method = parse_method(read_scalar<std::string>(section["method"], at("method"), "a string"),
                            at("method"));
  if (section["r"]) c.r = read_scalar<int64_t>(section["r"], at("r"), "an integer");
  if (c.r <= 0) throw InputError(fmt::format("{} must be > 0, got {}", at("r"), c.r));
  if (c.r > INT32_MAX)
    throw InputError(fmt::format("{} must be at most {}, got {}", at("r"), INT32_MAX, c.r));
  if (section["alpha"]) c.alpha = read_scalar<double>(section["alpha"], at("alpha"), "a number");
  if (!(c.alpha > 0)) throw InputError(fmt::format("{} must be > 0, got {}", at("alpha"), c.alpha));
  if (c.alpha > FLT_MAX)  // the scaling is a float
    throw InputError(fmt::format("{} must be a finite float, got {}", at("alpha"), c.alpha));
  if (section["dropout"])
    c.dropout = read_scalar<double>(section["dropout"], at("dropout"), "a number");
  if (!(c.dropout >= 0 && c.dropout < 1))
    throw InputError(fmt::format("{} must be in [0, 1), got {}", at("dropout"), c.dropout));
  if (section["use_rslora"])
    c.use_rslora = read_scalar<bool>(section["use_rslora"], at("use_rslora"), "true or false");
  if (const YAML::Node t = section["target_modules"]) {
    if (t.IsScalar() && t.Scalar() != "all-linear") {
      c.target_modules.clear();
      c.target_regex = t.Scalar();
      validate_module_regex(c.target_regex, at("target_modules"));
    } else {
      c.target_modules = read_names(t, at("target_modules"));
    }
  }
  const std::vector<std::string> examples = example_modules();
  if (!c.target_regex.empty()) {
    const text::Regex re = compile_module_regex(c.target_regex, at("target_modules"));
    if (std::none_of(examples.begin(), examples.end(), [&](const std::string& m) {
          return regex_full_match(re, m, at("target_modules"));
        }))
      throw InputError(fmt::format("{}: regex '{}' matches no linear module (e.g. {})",
                                   at("target_modules"), c.target_regex, examples[0]));
  } else {
    if (c.target_modules.empty())
      throw InputError(fmt::format("{} must name at least one module", at("target_modules")));
    for (const std::string& p : c.target_modules) {
      if (p == "all-linear") continue;
      const bool any = std::any_of(examples.begin(), examples.end(),
                                   [&](const std::string& m) { return suffix_match(m, p); });
      if (!any)
        throw InputError(fmt::format(
            "{}: unknown module pattern '{}' (expected query, key, value, attention.output.dense, "
            "intermediate.dense, output.dense, all-linear, or a suffix of a full module name)",
            at("target_modules"), p));
    }
  }
  if (const YAML::Node m = section["modules_to_save"]) {
    c.modules_to_save = read_names(m, at("modules_to_save"));
    for (const std::string& name : c.modules_to_save)
      if (name != "classifier" && name != "score" && name != "pooler")
        throw InputError(
            fmt::format("{}: unknown module '{}' (expected classifier, pooler or score)",
                        at("modules_to_save"), name));
    // PEFT's SEQ_CLS task always trains the classification head.
    if (std::find(c.modules_to_save.begin(), c.modules_to_save.end(), "classifier") ==
        c.modules_to_save.end())
      c.modules_to_save.insert(c.modules_to_save.begin(), "classifier");
  }
  if (c.dora() && c.dropout > 0)
    throw InputError(fmt::format(
        "{}: DoRA with dropout > 0 is not supported yet (PEFT then runs a second frozen GEMM on "
        "the dropped-out input); use dropout: 0 with method: dora",
        at("dropout")));
  return c;
}

GradientCheckpointing parse_gradient_checkpointing(const YAML::Node& n, const std::string& where) {
  if (!n.IsDefined() || n.IsNull()) return GradientCheckpointing::Off;
  if (n.IsScalar()) {
    const std::string s = n.Scalar();
    if (s == "off" || s == "false") return GradientCheckpointing::Off;
    if (s == "on" || s == "true") return GradientCheckpointing::On;
    if (s == "auto") return GradientCheckpointing::Auto;
  }
  throw InputError(fmt::format("{} must be off, on or auto", where));
}

const char* gradient_checkpointing_name(GradientCheckpointing c) {
  return c == GradientCheckpointing::On ? "on" : c == GradientCheckpointing::Off ? "off" : "auto";
}

}  // namespace ftune
