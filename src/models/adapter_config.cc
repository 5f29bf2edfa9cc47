// Adapter configuration: YAML validation and PEFT's module-name matching (see adapter_config.h).
#include "models/adapter_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <initializer_list>
#include <set>
#include <utility>

#include "core/error.h"
#include "models/backbone.h"
#include "text/regex.h"

namespace ftune {

bool is_all_linear(const std::string& s) {
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return lower == "all-linear";
}

namespace {

// PEFT's list rule: the full name, or a suffix after a dot.
bool name_matches(const std::string& name, const std::string& entry) {
  return name == entry || (name.size() > entry.size() && name.ends_with("." + entry));
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

// PEFT's test of one module against target_modules, before kinds and exclusions.
bool pattern_matches(const AdapterConfig& c, const std::string& name, bool linear,
                     const std::string& where) {
  if (!c.target_regex.empty())
    return regex_full_match(compile_module_regex(c.target_regex, where), name, where);
  for (const std::string& p : c.target_modules)
    if (is_all_linear(p) ? linear : name_matches(name, p)) return true;
  return false;
}

std::string listing(const std::vector<std::string>& names, size_t most = 8) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < most; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > most) s += fmt::format(", ... ({} in all)", names.size());
  return s.empty() ? "none" : s;
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

const std::vector<AdapterKey>& adapter_config_keys() {
  static const std::vector<AdapterKey> keys = {
      {"method", "none, lora or dora", "the adapter: LoRA, DoRA (weight-decomposed LoRA), or none",
       [](const AdapterConfig& c) { return std::string(peft_method_name(c.method)); }},
      {"r", "integer > 0", "the adapters' rank",
       [](const AdapterConfig& c) { return std::to_string(c.r); }},
      {"alpha", "number > 0", "lora_alpha: the update is scaled by alpha / r (alpha / sqrt(r) with rsLoRA)",
       [](const AdapterConfig& c) { return fmt::format("{}", c.alpha); }},
      {"dropout", "number in [0, 1)", "lora_dropout: dropout on the adapter's input",
       [](const AdapterConfig& c) { return fmt::format("{}", c.dropout); }},
      {"target_modules", "list of names, all-linear, or a regex",
       "the linear layers that get adapters, as PEFT 0.21 matches them: a list entry matches a "
       "module whose name equals it or ends with .entry; all-linear is every linear layer but the "
       "head; one string is a regex over whole names",
       [](const AdapterConfig& c) { return fmt::format("[{}]", fmt::join(c.target_modules, ", ")); }},
      {"use_rslora", "true or false", "rank-stabilised LoRA: scale by alpha / sqrt(r)",
       [](const AdapterConfig& c) { return std::string(c.use_rslora ? "true" : "false"); }},
      {"modules_to_save", "list of classifier, pooler",
       "modules trained whole besides the adapters (the head always is; add pooler for BERT's)",
       [](const AdapterConfig& c) { return fmt::format("[{}]", fmt::join(c.modules_to_save, ", ")); }},
  };
  return keys;
}

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

bool AdapterConfig::saved_whole(const std::string& name) const {
  // PEFT: re.match(rf"(^|.*\.){m}($|\..*)", key) for m in modules_to_save (SEQ_CLS adds
  // classifier and score): m is a run of whole name components.
  auto inside = [&](const std::string& m) {
    for (size_t at = name.find(m); at != std::string::npos; at = name.find(m, at + 1)) {
      const size_t end = at + m.size();
      if ((at == 0 || name[at - 1] == '.') && (end == name.size() || name[end] == '.'))
        return true;
    }
    return false;
  };
  if (inside("classifier") || inside("score")) return true;
  return std::any_of(modules_to_save.begin(), modules_to_save.end(), inside);
}

bool AdapterConfig::targets(const std::string& name) const {
  return !saved_whole(name) && pattern_matches(*this, name, /*linear=*/true, "target_modules");
}

void add_bert_layer_tail_modules(std::vector<ClassifierModule>& modules,
                                 const std::string& layer) {
  const ModuleKind A = ModuleKind::Adaptable, O = ModuleKind::Other;
  for (const auto& [suffix, kind] : std::initializer_list<std::pair<const char*, ModuleKind>>{
           {".attention.self.dropout", O},
           {".attention.output", O},
           {".attention.output.dense", A},
           {".attention.output.LayerNorm", O},
           {".attention.output.dropout", O},
           {".intermediate", O},
           {".intermediate.dense", A},
           {".intermediate.intermediate_act_fn", O},
           {".output", O},
           {".output.dense", A},
           {".output.LayerNorm", O},
           {".output.dropout", O}})
    modules.push_back({layer + suffix, kind});
}

std::vector<std::string> resolve_target_modules(const AdapterConfig& c,
                                                const std::vector<ClassifierModule>& modules,
                                                const std::string& where) {
  std::vector<std::string> adapted;
  std::set<std::string> used;  // list entries that matched a module outside modules_to_save
  for (const ClassifierModule& m : modules) {
    const bool linear = m.kind == ModuleKind::Adaptable || m.kind == ModuleKind::Head;
    if (c.saved_whole(m.name) || !pattern_matches(c, m.name, linear, where)) continue;
    for (const std::string& p : c.target_modules)
      if (is_all_linear(p) || name_matches(m.name, p)) used.insert(p);
    if (m.kind == ModuleKind::Adaptable) {
      adapted.push_back(m.name);
    } else if (m.kind == ModuleKind::Output) {
      throw InputError(fmt::format(
          "{}: target_modules matches {}, the causal LM's output projection: ftune keeps it "
          "frozen (PEFT's all-linear leaves it out too); name the layers' linear modules",
          where, m.name));
    } else if (m.kind == ModuleKind::Embedding) {
      throw InputError(fmt::format(
          "{}: target_modules matches {}, an embedding: PEFT would put a LoRA embedding there, "
          "which ftune does not support; name linear layers only",
          where, m.name));
    } else {
      throw InputError(fmt::format(
          "{}: target_modules matches '{}', which is not a linear layer; PEFT refuses it too "
          "(name linear layers: query, key, value, dense, intermediate.dense, output.dense, ...)",
          where, m.name));
    }
  }
  if (c.target_regex.empty())
    for (const std::string& p : c.target_modules)
      if (!used.count(p))
        throw InputError(fmt::format(
            "{}: target_modules entry '{}' matches no module that can take an adapter (modules "
            "of modules_to_save take none); with this list PEFT would adapt: {}",
            where, p, listing(adapted)));
  if (adapted.empty())
    throw InputError(fmt::format("{}: target_modules matches no linear module of this model",
                                 where));
  return adapted;
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
  std::string names;
  for (const AdapterKey& k : adapter_config_keys()) names += (names.empty() ? "" : ", ") + std::string(k.key);
  for (const auto& kv : section) {
    const std::string key = kv.first.as<std::string>();
    const auto& keys = adapter_config_keys();
    if (std::none_of(keys.begin(), keys.end(), [&](const AdapterKey& k) { return key == k.key; }))
      throw InputError(fmt::format("{}: unknown key '{}' (expected one of {})", where, key, names));
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
    if (t.IsScalar() && !is_all_linear(t.Scalar())) {
      c.target_modules.clear();
      c.target_regex = t.Scalar();
      validate_module_regex(c.target_regex, at("target_modules"));
    } else if (t.IsScalar()) {
      c.target_modules = {"all-linear"};
    } else {
      c.target_modules = read_names(t, at("target_modules"));
    }
  }
  // Typos are caught here, against the module names of every family; which modules a model
  // really adapts is resolved when it is built (resolve_target_modules).
  const std::vector<ClassifierModule> modules = known_modules();  // models/backbone.h
  if (!c.target_regex.empty()) {
    const text::Regex re = compile_module_regex(c.target_regex, at("target_modules"));
    if (std::none_of(modules.begin(), modules.end(), [&](const ClassifierModule& m) {
          return regex_full_match(re, m.name, at("target_modules"));
        }))
      throw InputError(fmt::format(
          "{}: regex '{}' matches no module (it must match a whole name, e.g. {})",
          at("target_modules"), c.target_regex, "bert.encoder.layer.0.attention.self.query"));
  } else {
    if (c.target_modules.empty())
      throw InputError(fmt::format("{} must name at least one module", at("target_modules")));
    for (const std::string& p : c.target_modules) {
      if (is_all_linear(p)) continue;
      if (std::none_of(modules.begin(), modules.end(),
                       [&](const ClassifierModule& m) { return name_matches(m.name, p); }))
        throw InputError(fmt::format(
            "{}: unknown module pattern '{}' (expected query, key, value, attention.output.dense, "
            "intermediate.dense, output.dense, dense, pooler.dense, all-linear, or a suffix of a "
            "full module name)",
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
