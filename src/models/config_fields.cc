// Shared config.json field readers (see config_fields.h).
#include "models/config_fields.h"

#include <fmt/format.h>

#include <cfloat>
#include <charconv>

#include "core/error.h"
#include "io/json_file.h"

namespace ftune {

int64_t config_size(const nlohmann::json& j, const char* key, const std::string& path,
                    std::optional<int64_t> fallback) {
  // Sizes are 32-bit in ftune (token, position and type ids are int32): larger values can only
  // come from a corrupt or hostile file, and would overflow the sizes computed from them.
  const int64_t v = fallback ? io::get_optional_int(j, key, path).value_or(*fallback)
                             : io::get_int(j, key, path);
  if (v <= 0 || v > kConfigMaxSize)
    throw InputError(
        fmt::format("{}: key '{}' must be in [1, {}], got {}", path, key, kConfigMaxSize, v));
  return v;
}

float config_real(const nlohmann::json& j, const char* key, double fallback, bool probability,
                  const std::string& path) {
  // Floats are read as doubles and must fit a float (casting 1e300 is undefined behaviour).
  const double v = io::get_optional_float(j, key, path).value_or(fallback);
  // (A probability just below 1 would round to 1.0f: compared as the float it becomes.)
  const bool ok =
      probability ? v >= 0 && v < 1 && static_cast<float>(v) < 1.0f : v >= 0 && v <= FLT_MAX;
  if (!ok)
    throw InputError(fmt::format("{}: key '{}' must be {}, got {}", path, key,
                                 probability ? "in [0, 1)" : "a finite number >= 0", v));
  return static_cast<float>(v);
}

std::vector<std::string> numbered_labels(int64_t n) {
  if (n <= 0) throw InputError(fmt::format("num_labels must be positive, got {}", n));
  std::vector<std::string> names;
  for (int64_t i = 0; i < n; ++i) names.push_back(fmt::format("LABEL_{}", i));
  return names;
}

std::vector<std::string> config_labels(const nlohmann::json& j, const std::string& path) {
  if (j.contains("id2label") && j["id2label"].is_object() && !j["id2label"].empty()) {
    // Keys "0".."K-1", each once (transformers reads them with int(key)); names as written. The
    // keys must be exactly the ids ("01" next to "1" would leave a label unnamed).
    const auto& m = j["id2label"];
    if (m.size() > static_cast<size_t>(kConfigMaxLabels))
      throw InputError(fmt::format("{}: id2label has {} labels, more than the {} ftune supports",
                                   path, m.size(), kConfigMaxLabels));
    std::vector<std::string> labels(m.size());
    std::vector<bool> seen(m.size(), false);
    for (auto it = m.begin(); it != m.end(); ++it) {
      size_t idx = m.size();
      const std::string& key = it.key();
      const auto parsed = std::from_chars(key.data(), key.data() + key.size(), idx);
      if (parsed.ec != std::errc() || parsed.ptr != key.data() + key.size() ||
          std::to_string(idx) != key)
        idx = m.size();
      if (idx >= m.size() || seen[idx] || !it.value().is_string())
        throw InputError(fmt::format(
            "{}: id2label must map each id 0..{} to a label name; bad entry '{}'", path,
            m.size() - 1, it.key()));
      seen[idx] = true;
      labels[idx] = it.value().get<std::string>();
    }
    return labels;
  }
  const int64_t n = io::get_optional_int(j, "num_labels", path).value_or(2);
  if (n <= 0 || n > kConfigMaxLabels)
    throw InputError(
        fmt::format("{}: key 'num_labels' must be in [1, {}], got {}", path, kConfigMaxLabels, n));
  return numbered_labels(n);
}

void check_param_count(double params, const std::string& path, const std::string& what) {
  // A double: the products cannot overflow it, so a corrupt config is refused here rather than
  // by an allocation of terabytes.
  if (params > kConfigMaxParams)
    throw InputError(fmt::format(
        "{}: the sizes describe a model of {:.3g} parameters, more than the {:.3g} ftune supports "
        "({})",
        path, params, kConfigMaxParams, what));
}

nlohmann::json config_with_labels(const nlohmann::json& raw, const std::string& model_type,
                                  const std::string& architecture,
                                  const std::vector<std::string>& id2label) {
  nlohmann::json j = raw.is_object() ? raw : nlohmann::json::object();
  j["model_type"] = model_type;
  j["architectures"] = nlohmann::json::array({architecture});
  nlohmann::json id2 = nlohmann::json::object(), label2 = nlohmann::json::object();
  for (size_t i = 0; i < id2label.size(); ++i) {
    id2[std::to_string(i)] = id2label[i];
    label2[id2label[i]] = i;
  }
  j["id2label"] = id2;
  j["label2id"] = label2;
  j.erase("num_labels");
  return j;
}

}  // namespace ftune
