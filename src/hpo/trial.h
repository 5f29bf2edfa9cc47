// The data every part of the hyperparameter search shares: parameter distributions, trials and
// their states, intermediate reports (by step and by fold). Samplers and pruners read trials;
// storages persist them; workers create and finish them. Values are kept in Optuna's internal
// representation (a float or int as a double, a categorical as the index of its choice) so that
// golden cases generated with Optuna compare one to one.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ftune::hpo {

enum class Direction { Minimize, Maximize };

// One parameter's domain. Float/Int: [low, high], optionally log-scaled or stepped (step > 0:
// values low, low+step, ...; log and step exclude each other). Categorical: choices as written.
struct Distribution {
  enum class Kind { Float, Int, Categorical } kind = Kind::Float;
  double low = 0, high = 1;
  bool log = false;
  double step = 0;  // 0: continuous (Float) / 1 implied (Int)
  std::vector<std::string> choices;

  bool operator==(const Distribution&) const = default;
};

enum class TrialState { Waiting, Running, Complete, Pruned, Failed };

const char* to_string(TrialState s);

using Params = std::map<std::string, double>;  // name -> internal value (see above)

struct Trial {
  int64_t id = -1;      // storage key, unique across studies
  int64_t number = -1;  // 0, 1, 2, ... within its study, never repeated
  TrialState state = TrialState::Running;
  Params params;
  std::map<std::string, Distribution> distributions;  // of the params above
  std::optional<double> value;                        // final objective (Complete)
  std::map<int64_t, double> intermediate;             // step -> reported value
  std::map<int64_t, double> fold_values;              // fold -> that fold's final value
  std::string error;                                  // Failed: why
  int64_t retry_of = -1;                              // number of the trial this one retries
  // Attributes the worker or objective recorded (Optuna's user attributes): e.g. "resumed", how
  // a retry continued the work of the trial it retries. A JSON object.
  nlohmann::json attrs = nlohmann::json::object();
  double start_time = 0, end_time = 0;                // seconds since the epoch

  bool finished() const {
    return state == TrialState::Complete || state == TrialState::Pruned ||
           state == TrialState::Failed;
  }
  // The last intermediate value (largest step); nullopt when none was reported.
  std::optional<double> last_intermediate() const {
    if (intermediate.empty()) return std::nullopt;
    return intermediate.rbegin()->second;
  }
};

}  // namespace ftune::hpo
