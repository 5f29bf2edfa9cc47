// Reading the fields every HF config.json of a classifier shares, with ftune's limits: sizes,
// real numbers, labels (id2label / num_labels) and the parameter-count bound, each a typed
// InputError naming the file and key; and writing the classification fields back.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ftune {

// Limits that no real checkpoint reaches: sizes are 32-bit (ids are int32), the deepest published
// transformers have ~200 layers, and 2^40 parameters is 4 TiB in f32.
constexpr int64_t kConfigMaxSize = INT32_MAX;
constexpr int64_t kConfigMaxLayers = 4096;
constexpr int64_t kConfigMaxLabels = int64_t{1} << 20;
constexpr double kConfigMaxParams = 1099511627776.0;  // 2^40

// An integer in [1, kConfigMaxSize]; `fallback` when the key is missing or null (none: required).
int64_t config_size(const nlohmann::json& j, const char* key, const std::string& path,
                    std::optional<int64_t> fallback = std::nullopt);
// A real that fits a float: a probability in [0, 1), or else a finite number >= 0.
float config_real(const nlohmann::json& j, const char* key, double fallback, bool probability,
                  const std::string& path);
// The label names: id2label ({"0": "neg", "1": "pos"}, keys exactly 0..n-1), else num_labels
// (LABEL_i), else 2 labels.
std::vector<std::string> config_labels(const nlohmann::json& j, const std::string& path);
std::vector<std::string> numbered_labels(int64_t n);  // LABEL_0 .. LABEL_{n-1}
// Refuses sizes describing more than kConfigMaxParams parameters (`what` names the sizes).
void check_param_count(double params, const std::string& path, const std::string& what);
// `raw` (config.json as read) with model_type, architectures, id2label and label2id set for
// saving (num_labels dropped: id2label carries it).
nlohmann::json config_with_labels(const nlohmann::json& raw, const std::string& model_type,
                                  const std::string& architecture,
                                  const std::vector<std::string>& id2label);

}  // namespace ftune
