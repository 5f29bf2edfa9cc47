// Run views (run_view.h) from what a run directory records (run_data.h). Per-step series come from
// metrics.jsonl; whole-run numbers (input wait, memory, NVML) only exist in summary.json, which a
// run writes when it ends, so a live run shows those views as "not recorded yet".
#include "report/run_view.h"

#include <fmt/format.h>

#include <algorithm>

#include <map>
#include <set>

#include "report/svg_chart.h"

namespace ftune::report {
namespace {

using nlohmann::json;

std::optional<double> number_at(const json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// One per-step series from the train lines (x = step).
Series train_series(const std::vector<json>& train, const char* key, const std::string& name) {
  Series s{name, {}, true, true};
  for (const json& line : train)
    if (auto v = number_at(line, key))
      s.points.push_back({line["step"].get<double>(), *v,
                          fmt::format("step {}: {} {}", line["step"].dump(), name,
                                      short_number(*v)),
                          ""});
  return s;
}

std::string chart_or_missing(Chart chart, const std::string& missing) {
  size_t n = 0;
  for (const Series& s : chart.series) n += s.points.size();
  if (n == 0) return missing_note(missing);
  return svg_xy_chart(chart);
}

std::string summary_number(const json& summary, const char* key, const char* unit = "") {
  const auto v = number_at(summary, key);
  return v ? short_number(*v) + unit : std::string("not recorded");
}

Section overview(const RunData& run) {
  const json& s = run.summary;
  std::vector<std::pair<std::string, std::string>> rows = {{"run directory", run.dir}};
  if (s.is_object()) {
    for (const char* key : {"status", "model", "device", "precision", "peft", "attention"})
      if (s.contains(key) && s[key].is_string()) rows.emplace_back(key, s[key].get<std::string>());
    rows.emplace_back("steps", summary_number(s, "steps"));
    rows.emplace_back("epochs", summary_number(s, "epochs"));
    rows.emplace_back("micro-batch x accumulation",
                      summary_number(s, "micro_batch") + " x " +
                          summary_number(s, "gradient_accumulation"));
    rows.emplace_back("samples/s (whole run)", summary_number(s, "train_samples_per_s"));
    rows.emplace_back("real tokens/s (whole run)", summary_number(s, "train_tokens_per_s"));
    rows.emplace_back("model TFLOP/s", summary_number(s, "model_tflops_per_s"));
    rows.emplace_back("MFU", summary_number(s, "mfu"));
    rows.emplace_back("wall seconds", summary_number(s, "wall_seconds"));
    if (s.contains("eval_metric") && s["eval_metric"].is_string()) {
      const std::string metric = s["eval_metric"].get<std::string>();
      rows.emplace_back("best " + metric, s.contains("best_eval")
                                              ? summary_number(s["best_eval"], metric.c_str())
                                              : "not recorded");
    }
  }
  std::string html = key_value_table(rows);
  for (const std::string& m : run.missing) html += missing_note(m);
  return {"run-overview", "Overview", html};
}

Section loss_view(const RunData& run) {
  Chart loss{"run-loss", "Loss per step", {"step"}, {"loss"}};
  loss.series.push_back(train_series(run.train, "loss", "train loss"));
  Series eval_loss{"validation loss", {}, true, true};
  for (const json& e : run.evals)
    if (e["split"] == "validation")
      if (auto v = number_at(e, "loss"))
        eval_loss.points.push_back({e["step"].get<double>(), *v, "", ""});
  if (!eval_loss.points.empty()) loss.series.push_back(eval_loss);
  loss.note = "Train loss: mean over each log interval (training.log_every steps).";
  Chart lr{"run-lr", "Learning rate per step", {"step"}, {"learning rate"}};
  lr.series.push_back(train_series(run.train, "lr", "learning rate"));
  Chart gn{"run-grad-norm", "Gradient norm per step", {"step"}, {"gradient norm"}};
  gn.series.push_back(train_series(run.train, "grad_norm", "gradient norm"));
  gn.note = "Before clipping, at the last step of each log interval.";
  const std::string none = "no train lines in metrics.jsonl yet";
  return {"run-training", "Loss and learning rate",
          "<div class=\"grid2\">" + chart_or_missing(loss, none) + chart_or_missing(lr, none) +
              chart_or_missing(gn, none) + "</div>"};
}

Section eval_view(const RunData& run) {
  // Scalar metrics of the validation evaluations, one series each, in a fixed order: the
  // classification metrics, a multi-label run's and a regression run's (training.loss mse), each
  // shown when an evaluation has it.
  std::vector<std::string> metrics;
  for (const char* m :
       {"accuracy", "macro_f1", "micro_f1", "f1", "mcc", "roc_auc", "average_precision",
        "macro_roc_auc", "subset_accuracy", "pearson", "spearman", "mse", "mae"})
    if (std::any_of(run.evals.begin(), run.evals.end(),
                    [&](const json& e) { return number_at(e, m).has_value(); }))
      metrics.push_back(m);
  if (metrics.empty()) metrics = {"accuracy", "macro_f1"};
  Chart chart{"run-eval", "Validation metrics per evaluation", {"step"}, {"value"}};
  std::string table =
      "<table class=\"data sortable\" id=\"run-eval-table\"><thead><tr><th>split</th>"
      "<th>step</th><th>epoch</th><th>loss</th>";
  for (const std::string& m : metrics) table += "<th>" + m + "</th>";
  table += "</tr></thead><tbody>";
  for (const std::string& m : metrics) {
    Series s{m, {}, true, true};
    for (const json& e : run.evals)
      if (e["split"] == "validation")
        if (auto v = number_at(e, m.c_str()))
          s.points.push_back({e["step"].get<double>(), *v,
                              fmt::format("step {}: {} {}", e["step"].dump(), m, short_number(*v)),
                              ""});
    if (!s.points.empty()) chart.series.push_back(std::move(s));
  }
  for (const json& e : run.evals) {
    table += "<tr><td class=\"text\">" + escape_html(e["split"].get<std::string>()) + "</td><td>" +
             e["step"].dump() + "</td>";
    for (const char* k : {"epoch", "loss"}) {
      const auto v = number_at(e, k);
      table += "<td>" + (v ? short_number(*v) : std::string()) + "</td>";
    }
    for (const std::string& m : metrics) {
      const auto v = number_at(e, m.c_str());
      table += "<td>" + (v ? short_number(*v) : std::string()) + "</td>";
    }
    table += "</tr>";
  }
  table += "</tbody></table>";
  chart.note = "Metrics at the default decision rule (argmax); the table lists every evaluation.";
  return {"run-evaluation", "Evaluation metrics",
          chart_or_missing(chart, "no evaluation lines in metrics.jsonl yet") +
              (run.evals.empty() ? std::string() : table)};
}

Section throughput_view(const RunData& run) {
  Chart sps{"run-samples-per-s", "Samples/s per log interval", {"step"}, {"samples/s"}};
  sps.series.push_back(train_series(run.train, "samples_per_s", "samples/s"));
  Chart tps{"run-tokens-per-s", "Real tokens/s per log interval", {"step"}, {"tokens/s"}};
  tps.series.push_back(train_series(run.train, "tokens_per_s", "real tokens/s"));
  tps.note = "Real tokens: padding not counted.";
  const std::string none = "no train lines in metrics.jsonl yet";
  std::string html = "<div class=\"grid2\">" + chart_or_missing(sps, none) +
                     chart_or_missing(tps, none) + "</div>";
  // Per log interval since metrics.jsonl carries them (older runs: the whole-run figure only).
  Chart wait{"run-input-wait", "Input wait per log interval", {"step"}, {"% of the interval"}};
  Series w = train_series(run.train, "input_wait_fraction", "input wait");
  for (Point& p : w.points) {
    p.y *= 100;
    p.title = fmt::format("step {}: input wait {:.2f} %", p.x, p.y);
  }
  wait.series.push_back(std::move(w));
  wait.note = "Time the trainer waited for the next batch from the prefetcher.";
  Chart gpu{"run-gpu-util", "GPU utilisation per log interval (NVML)", {"step"}, {"%"}};
  gpu.series.push_back(train_series(run.train, "gpu_util_percent", "GPU busy"));
  gpu.note = "Mean over the sampler's readings (every 0.5 s) in the interval.";
  const bool has_wait = !wait.series[0].points.empty(), has_gpu = !gpu.series[0].points.empty();
  if (has_wait || has_gpu)
    html += "<div class=\"grid2\">" + (has_wait ? svg_xy_chart(wait) : "") +
            (has_gpu ? svg_xy_chart(gpu) : "") + "</div>";
  if (const auto f = number_at(run.summary, "input_wait_fraction")) {
    html += key_value_table(
        {{"input-wait fraction (whole run)", fmt::format("{:.4f} %", *f * 100)},
         {"input-wait seconds", summary_number(run.summary, "input_wait_seconds")},
         {"train seconds", summary_number(run.summary, "train_seconds")}});
    if (!has_wait)
      html += "<p class=\"note\">This run's metrics.jsonl has no per-interval input wait (written "
              "by an older ftune): the whole-run figure only.</p>";
  } else {
    html += missing_note("input-wait fraction (summary.json, written when the run ends)");
  }
  return {"run-throughput", "Throughput and input wait", html};
}

Section memory_view(const RunData& run) {
  const json* memory = run.summary.is_object() && run.summary.contains("memory")
                           ? &run.summary["memory"]
                           : nullptr;
  if (!memory || !memory->contains("planned") || !(*memory)["planned"].is_object())
    return {"run-memory", "Memory: planned vs measured",
            missing_note("the memory plan (summary.json, written when the run ends)")};
  const json& planned = (*memory)["planned"];
  const json* touched = memory->contains("touched") ? &(*memory)["touched"] : nullptr;
  BarChart bars{"run-memory-chart", "Memory by category", "bytes"};
  std::vector<std::optional<double>> p, t;
  for (const auto& [category, bytes] : planned.items()) {
    if (!bytes.is_number() || bytes.get<double>() <= 0) continue;  // categories this run lacks
    bars.categories.push_back(category);
    p.push_back(bytes.get<double>());
    t.push_back(touched ? number_at(*touched, category.c_str()) : std::nullopt);
  }
  bars.series.push_back({"planned", p});
  if (touched) {
    bars.series.push_back({"touched (measured)", t});
    bars.note = "Measured on the CPU arena: the bytes of each buffer the run really wrote.";
  }
  std::vector<std::pair<std::string, std::string>> rows;
  const auto bytes_row = [&](const char* label, const json& j, const char* key) {
    if (const auto v = number_at(j, key)) rows.emplace_back(label, format_bytes(*v));
  };
  bytes_row("planned (arena + workspace)", *memory, "planned_total_bytes");
  bytes_row("touched on the CPU arena", *memory, "touched_bytes");
  bytes_row("measured on the device (cudaMemGetInfo)", *memory, "measured_device_bytes");
  bytes_row("peak device bytes (allocator)", run.summary, "peak_device_bytes");
  bytes_row("peak host RSS", run.summary, "peak_rss_bytes");
  bytes_row("budget", *memory, "budget_bytes");
  if (memory->contains("batch_choice") && (*memory)["batch_choice"].is_string())
    rows.emplace_back("batch choice", (*memory)["batch_choice"].get<std::string>());
  std::string html = svg_bar_chart(bars) + key_value_table(rows);
  if (!touched)
    html += "<p class=\"note\">On a GPU ftune measures the device memory as a whole "
            "(measured_device_bytes), not per category.</p>";
  return {"run-memory", "Memory: planned vs measured", html};
}

Section gpu_view(const RunData& run) {
  const json* gpu = run.summary.is_object() && run.summary.contains("gpu") ? &run.summary["gpu"]
                                                                           : nullptr;
  if (!gpu || !gpu->is_object())
    return {"run-gpu", "GPU (NVML)",
            missing_note(run.summary.is_object()
                             ? "GPU statistics: this run did not sample NVML (a CPU run)"
                             : "GPU statistics (summary.json, written when the run ends)")};
  std::vector<std::pair<std::string, std::string>> rows;
  for (const char* key : {"name", "nvml", "driver_version"})
    if (gpu->contains(key) && (*gpu)[key].is_string()) rows.emplace_back(key, (*gpu)[key].get<std::string>());
  rows.emplace_back("samples", summary_number(*gpu, "samples"));
  if (gpu->contains("utilization_percent")) {
    rows.emplace_back("utilisation mean %", summary_number((*gpu)["utilization_percent"], "mean"));
    rows.emplace_back("utilisation max %", summary_number((*gpu)["utilization_percent"], "max"));
  }
  if (const auto v = number_at(*gpu, "memory_used_max_bytes")) rows.emplace_back("memory used max", format_bytes(*v));
  if (const auto v = number_at(*gpu, "memory_total_bytes")) rows.emplace_back("memory total", format_bytes(*v));
  if (const auto v = number_at(*gpu, "power_watts_mean")) rows.emplace_back("power mean W", short_number(*v));
  if (const auto v = number_at(*gpu, "temperature_max_c")) rows.emplace_back("temperature max C", short_number(*v));
  if (const auto v = number_at(*gpu, "sm_clock_mean_mhz")) rows.emplace_back("SM clock mean MHz", short_number(*v));
  return {"run-gpu", "GPU (NVML)",
          key_value_table(rows) +
              "<p class=\"note\">ftune keeps NVML's mean and maximum over the run; a per-step "
              "utilisation series is not recorded.</p>"};
}

Section config_view(const RunData& run) {
  return {"run-config", "Resolved config (config.yaml)",
          run.config_yaml.empty() ? missing_note("config.yaml")
                                  : "<pre class=\"config\">" + escape_html(run.config_yaml) +
                                        "</pre>"};
}

}  // namespace

std::vector<Section> run_sections(const RunData& run) {
  return {overview(run),    loss_view(run), eval_view(run), throughput_view(run),
          memory_view(run), gpu_view(run),  config_view(run)};
}

Page run_page(const RunData& run) {
  Page page;
  page.title = "ftune run: " + run.dir;
  page.subtitle = fmt::format("{} logged train lines, {} evaluations{}", run.train.size(),
                              run.evals.size(),
                              run.summary.is_object() ? "" : "; the run has not ended");
  page.sections = run_sections(run);
  return page;
}

}  // namespace ftune::report
