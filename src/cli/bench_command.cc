// `ftune bench --config FILE.yaml [--steps N] [--warmup N] [--repeats N] [--only a,b]
// [--cpu-gemm LIB] [--json FILE] [section.key=value ...]`: the configured training timed with
// ftune's defaults and with each optimisation switched the other way (train/bench_runner.h),
// printed as a table on stdout; --json also writes the whole report (atomically). --cpu-gemm picks
// the CPU GEMM's library for the whole run (ops/cpu_gemm_library.h; run twice to compare).
// Nothing else is written.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/arguments.h"
#include "cli/commands.h"
#include "train/memory_planner.h"
#include "io/json_file.h"
#include "ops/cpu_gemm_library.h"
#include "train/bench_runner.h"
#include "train/bench_switches.h"

namespace ftune::cli {
namespace {

std::string bytes_or_dash(const nlohmann::json& j) {
  return j.is_number() ? format_bytes(j.get<size_t>()) : "-";
}

std::string table(const nlohmann::json& r) {
  std::string out = fmt::format(
      "ftune bench: {} on {}{}, {}, effective batch {}, {} timed steps after {} warm-up, {} "
      "repeat{}\n\n",
      r["model"].get<std::string>(), r["device"].get<std::string>(),
      r["gpu"].get<std::string>().empty() ? "" : " (" + r["gpu"].get<std::string>() + ")",
      r["precision"].get<std::string>(), r["effective_batch"].get<int64_t>(),
      r["steps"].get<int64_t>(), r["warmup"].get<int64_t>(), r["repeats"].get<int64_t>(),
      r["repeats"].get<int64_t>() == 1 ? "" : "s");
  if (r["device"].get<std::string>() == "cpu")
    out.insert(out.size() - 2, fmt::format(", CPU GEMM {}", r["cpu_gemm"].get<std::string>()));
  // The variant's setting, with the default's in parentheses.
  const auto setting_of = [](const nlohmann::json& v) {
    std::string setting = v["setting"].get<std::string>();
    if (v.contains("default_setting") && !v["default_setting"].get<std::string>().empty() &&
        !setting.empty())
      setting += " (" + v["default_setting"].get<std::string>() + ")";
    return setting;
  };
  size_t width = 16;
  for (const nlohmann::json& v : r["variants"]) width = std::max(width, setting_of(v).size());
  out += fmt::format("{:<14} {:<{}} {:>10} {:>10} {:>6} {:>10} {:>10} {:>12} {:>22} {:>12} {:>14}\n",
                     "variant", "setting", width, "samples/s", "tokens/s", "MFU", "planned",
                     "measured", "micro x acc", "default speedup", "loss vs def", "setup/warm-up");
  std::string notes;
  for (const nlohmann::json& v : r["variants"]) {
    const std::string name = v["name"].get<std::string>();
    const std::string setting = setting_of(v);
    if (v["status"] != "ran") {
      out += fmt::format("{:<14} {:<{}} {}: see below\n", name, setting, width,
                         v["status"].get<std::string>());
      notes += fmt::format("  {}: {}: {}\n", name, v["status"].get<std::string>(),
                           v.value("reason", std::string()));
      continue;
    }
    std::string speedup = "-", loss = "-";
    if (v.contains("speedup_of_default")) {
      const auto& s = v["speedup_of_default"];
      speedup = fmt::format("{:.2f}x ({:.2f}-{:.2f})", s["median"].get<double>(),
                            s["min"].get<double>(), s["max"].get<double>());
      loss = fmt::format("{:+.2e}", v["loss_vs_default"].get<double>());
    }
    out += fmt::format(
        "{:<14} {:<{}} {:>10.2f} {:>10.0f} {:>6} {:>10} {:>10} {:>12} {:>22} {:>12} {:>14}\n",
        name, setting, width, v["samples_per_s"].get<double>(), v["tokens_per_s"].get<double>(),
        v["mfu"].is_number() ? fmt::format("{:.1f}%", 100 * v["mfu"].get<double>()) : "-",
        bytes_or_dash(v["planned_bytes"]), bytes_or_dash(v["measured_bytes"]),
        v["micro_batch"].get<std::string>(), speedup, loss,
        fmt::format("{:.1f}/{:.1f} s", v["setup_seconds"].get<double>(),
                    v["warmup_seconds"].get<double>()));
  }
  out += "\nsetting: the variant's (the default's in parentheses); default speedup: default "
         "samples/s over the variant's, median (min-max) over the repeats; loss vs def: the "
         "relative difference of the mean training loss over the timed steps\n";
  if (!notes.empty()) out += "\nnot run:\n" + notes;
  return out;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto only = std::make_shared<std::string>();
  auto json = std::make_shared<std::string>();
  auto cpu_gemm = std::make_shared<std::string>();
  std::string names;
  for (const BenchSwitch& s : bench_switches()) names += (names.empty() ? "" : ", ") + s.name;
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time the configured training with ftune's defaults and each optimisation switched");
  cmd->add_option("--config", o->config, "YAML training configuration")->required();
  cmd->add_option("--steps", o->steps, "Timed optimizer steps per run (10)")
      ->check(positive_integer());
  cmd->add_option("--warmup", o->warmup,
                  "Untimed steps before them (default: 2 x steps on a GPU, 1 on the CPU)")
      ->check(non_negative_integer());
  cmd->add_option("--repeats", o->repeats, "Runs of each variant (2)")->check(positive_integer());
  cmd->add_option("--only", *only, "Comma-separated variants to run besides the default: " + names);
  cmd->add_option("--cpu-gemm", *cpu_gemm,
                  "CPU GEMM library for every variant: openblas, onednn or auto (default: "
                  "FTUNE_CPU_GEMM, else oneDNN where it loads)");
  cmd->add_option("--json", *json, "Also write the whole report to this JSON file");
  cmd->add_option("overrides", o->overrides, "section.key=value overrides of the configuration");
  cmd->callback([o, only, json, cpu_gemm] {
    if (!cpu_gemm->empty())
      cpu::set_gemm_library(cpu::parse_gemm_library(*cpu_gemm, "--cpu-gemm"));
    o->only.clear();
    for (size_t start = 0; !only->empty() && start <= only->size();) {
      const size_t comma = std::min(only->find(',', start), only->size());
      if (comma > start) o->only.push_back(only->substr(start, comma - start));
      start = comma + 1;
    }
    nlohmann::json report = run_bench(*o);
    report["cpu_gemm"] = cpu::gemm_library_name(cpu::gemm_library());
    std::cout << table(report) << std::flush;  // first: a --json path that fails loses nothing
    if (!json->empty()) io::write_json_atomic(*json, report);
  });
}

}  // namespace ftune::cli
