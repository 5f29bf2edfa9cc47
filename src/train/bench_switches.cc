// The switches of `ftune bench` (see bench_switches.h). Each flip reads the default run's resolved
// setting (settings[name]["value"]) and asks for the other state through the same configuration
// key a user would set.
#include "train/bench_switches.h"

#include <fmt/format.h>

#include <numeric>
#include <thread>

#include "core/error.h"

namespace ftune {
namespace {

// A boolean setting flipped through `key` (values on / off).
SwitchFlip flip_on_off(const nlohmann::json& settings, const std::string& name,
                       const std::string& key) {
  const bool on = settings.at(name).at("value").get<bool>();
  return {{fmt::format("{}={}", key, on ? "off" : "on")}, on ? "off" : "on", ""};
}

// The fixed micro-batch a hand-written script would use: 8 rows (the common choice), or the
// largest divisor of the effective batch below it, accumulated to the effective batch.
int64_t hand_micro_batch(int64_t effective) { return std::gcd(effective, int64_t{8}); }

std::vector<BenchSwitch> make_switches() {
  std::vector<BenchSwitch> s;
  s.push_back({"precision", "training.precision: mixed precision (bf16/fp16) against fp32",
               [](const TrainConfig&, const nlohmann::json& st) -> SwitchFlip {
                 const std::string p = st.at("precision").at("value").get<std::string>();
                 const char* other = p == "fp32" ? "bf16" : "fp32";
                 return {{fmt::format("training.precision={}", other)}, other, ""};
               }});
  s.push_back({"tf32", "training.tf32: TF32 tensor cores for the fp32 GEMMs",
               [](const TrainConfig&, const nlohmann::json& st) {
                 return flip_on_off(st, "tf32", "training.tf32");
               }});
  s.push_back({"attention", "training.attention: cuDNN flash attention against ftune's kernel",
               [](const TrainConfig&, const nlohmann::json& st) -> SwitchFlip {
                 const std::string k = st.at("attention").at("value").get<std::string>();
                 const char* other = k == "cudnn" ? "ftune" : "cudnn";
                 return {{fmt::format("training.attention={}", other)}, other, ""};
               }});
  s.push_back({"cuda_graphs", "training.cuda_graphs: each micro-batch shape captured and replayed",
               [](const TrainConfig&, const nlohmann::json& st) {
                 return flip_on_off(st, "cuda_graphs", "training.cuda_graphs");
               }});
  s.push_back({"packing", "data.packing: padding-free packed micro-batches",
               [](const TrainConfig&, const nlohmann::json& st) {
                 return flip_on_off(st, "packing", "data.packing");
               }});
  s.push_back({"padding", "training.pad_to_multiple_of: length buckets against each micro-batch's "
                          "longest row",
               [](const TrainConfig&, const nlohmann::json& st) -> SwitchFlip {
                 if (st.at("packing").at("value").get<bool>())
                   return {{}, "", "packed micro-batches compute no padding"};
                 const nlohmann::json& v = st.at("padding").at("value");
                 if (v.at("multiple").get<int64_t>() == 1 && !v.at("buckets").get<bool>())
                   return {{}, "", "micro-batches are padded only to their longest row already"};
                 return {{"training.pad_to_multiple_of=1"}, "longest row", ""};
               }});
  s.push_back({"checkpointing", "training.gradient_checkpointing: recompute activations in backward",
               [](const TrainConfig&, const nlohmann::json& st) {
                 return flip_on_off(st, "checkpointing", "training.gradient_checkpointing");
               }});
  s.push_back({"micro_batch", "training.batch_size: the planner's micro-batch against a fixed one",
               [](const TrainConfig& cfg, const nlohmann::json& st) -> SwitchFlip {
                 const int64_t effective = cfg.effective_batch();
                 const std::string eff = fmt::format("training.effective_batch_size={}", effective);
                 if (cfg.training.batch_size > 0)
                   return {{"training.batch_size=auto", eff}, "planner's", ""};
                 const int64_t fixed = hand_micro_batch(effective);
                 const nlohmann::json& v = st.at("micro_batch").at("value");
                 if (v.at("tokens").get<int64_t>() == 0 && v.at("rows").get<int64_t>() == fixed)
                   return {{}, "",
                           fmt::format("the planner chose {} x {} itself", fixed,
                                       effective / fixed)};
                 return {{fmt::format("training.batch_size={}", fixed), eff},
                         fmt::format("fixed {} x {}", fixed, effective / fixed), ""};
               }});
  s.push_back({"prefetch", "training.prefetch: step batches assembled ahead on a thread",
               [](const TrainConfig&, const nlohmann::json& st) -> SwitchFlip {
                 const int64_t depth = st.at("prefetch").at("value").get<int64_t>();
                 const int64_t other = depth > 1 ? 1 : 4;
                 return {{fmt::format("training.prefetch={}", other)}, std::to_string(other), ""};
               }});
  s.push_back({"threads", "training.threads: compute threads of the CPU's kernels",
               [](const TrainConfig& cfg, const nlohmann::json& st) -> SwitchFlip {
                 const Device device = parse_device(cfg.training.device);
                 if (!device.is_cpu())
                   return {{}, "",
                           fmt::format("compute threads run the CPU's kernels; this run is on {}",
                                       device_name(device))};
                 const int64_t threads = st.at("threads").at("value").get<int64_t>();
                 if (threads > 1) return {{"training.threads=1"}, "1", ""};
                 const unsigned cores = std::thread::hardware_concurrency();
                 if (cores <= 1) return {{}, "", "this machine has one core"};
                 return {{"training.threads=0"}, fmt::format("all {} cores", cores), ""};
               }});
  return s;
}

}  // namespace

const std::vector<BenchSwitch>& bench_switches() {
  static const std::vector<BenchSwitch> switches = make_switches();
  return switches;
}

std::vector<const BenchSwitch*> select_switches(const std::vector<std::string>& only) {
  std::vector<const BenchSwitch*> out;
  std::string names;
  for (const BenchSwitch& s : bench_switches()) names += (names.empty() ? "" : ", ") + s.name;
  if (only.empty()) {
    for (const BenchSwitch& s : bench_switches()) out.push_back(&s);
    return out;
  }
  for (const std::string& name : only) {
    const BenchSwitch* found = nullptr;
    for (const BenchSwitch& s : bench_switches())
      if (s.name == name) found = &s;
    if (!found)
      throw InputError(fmt::format("--only: '{}' is not a variant; the variants are: {}", name,
                                   names));
    bool seen = false;
    for (const BenchSwitch* o : out) seen = seen || o == found;
    if (!seen) out.push_back(found);
  }
  return out;
}

}  // namespace ftune
