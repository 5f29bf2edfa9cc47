// `ftune plan --config FILE.yaml [--memory SIZE] [--json] [section.key=value ...]`: the memory
// plan of a training run without running it — bytes by category (parameters, gradients, optimizer
// state, activations, attention, workspaces, inputs) with and without gradient checkpointing, the
// largest micro-batch that fits the budget, and the micro-batch x accumulation the trainer will
// use for the effective batch (train/memory_planner.h). The data is read and tokenized, so the
// plan is for the real longest sequence.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/thread_pool.h"
#include "dist/gradient_reducer.h"
#include "models/hf_checkpoint.h"
#include "models/sequence_classifier.h"
#include "text/tokenizer.h"
#include "train/batch_plan.h"

namespace ftune::cli {
namespace {

// Rows of an uncapped search: the largest micro-batch the budget holds, whatever the effective
// batch.
constexpr int64_t kSearchCap = int64_t{1} << 20;

struct PlanArgs {
  std::string config;
  std::string memory;
  bool json = false;
  int64_t ranks = 1;  // data-parallel ranks (CPU: all on this machine)
  std::vector<std::string> overrides;
};

SequenceClassifier unplanned_model(const PlanTarget& t) {
  ClassifierOptions options;
  options.max_batch = options.max_seq = 1;
  options.training = false;
  options.adapters = t.adapters;
  return SequenceClassifier(t.model, options);
}

int64_t parameter_count(const PlanTarget& t) {
  const SequenceClassifier model = unplanned_model(t);
  return model.params().total() + model.adapter_params().total();
}

// A data-parallel run's gradient reduction (dist/gradient_reducer.h): its buckets over the
// trainable parameters, summed in place (no memory beyond the gradients the plan holds).
nlohmann::json reduction_json(const PlanTarget& t, const TrainConfig& cfg) {
  const SequenceClassifier model = unplanned_model(t);
  const auto elements = static_cast<int64_t>(cfg.training.reduce_bucket_mb * 1024 * 1024 / 4);
  const std::vector<ReduceBucket> buckets =
      plan_buckets(model.trainable_params(), std::max<int64_t>(1, elements));
  return {{"buckets", buckets.size()},
          {"bucket_mb", cfg.training.reduce_bucket_mb},
          {"bytes_per_step", model.trainable_params().total() * 4},
          {"extra_bytes", 0}};
}

nlohmann::json plan_json(const MemoryPlan& m) {
  nlohmann::json categories = nlohmann::json::array();
  for (const MemoryCategory& c : m.categories)
    categories.push_back({{"name", c.name}, {"bytes", c.bytes}, {"note", c.note}});
  nlohmann::json j = {{"micro_batch", m.micro_batch},
                      {"rows", m.rows},
                      {"max_seq", m.max_seq},
                      {"gradient_checkpointing", gradient_checkpointing_name(m.checkpointing)},
                      {"categories", categories},
                      {"total_bytes", m.total}};
  // The run's largest micro-batch this plan is made for (rows, tokens and longest row are each
  // the largest of any micro-batch; `largest` is the one with the most tokens).
  if (m.planned_for)
    j["largest_in_run"] = {{"rows", m.planned_for->rows},
                           {"tokens", m.planned_for->tokens},
                           {"longest", m.planned_for->longest},
                           {"largest", m.planned_for->largest.to_json()}};
  return j;
}

void run_plan(const PlanArgs& a) {
  const TrainConfig cfg = TrainConfig::load(a.config, a.overrides);
  // The CPU's kernel scratch is per compute thread: plan for the threads the run will use.
  set_compute_threads(static_cast<int>(cfg.training.threads));
  const text::Tokenizer tok = load_run_tokenizer(cfg);
  const int64_t max_length = usable_max_length(cfg);
  const TrainData data = load_train_data(cfg, tok, max_length);
  LoadOptions load;
  if (data.task.causal_lm)
    load.causal_lm = true;  // model.task causal_lm: the LM head and its fused loss are planned
  else
    load.labels = data.labels.names;
  const ModelSpec model_spec = load_model_spec(cfg.model.path, load);
  const ModelInfo& model = model_spec.info();
  BatchPlanOptions options;
  // With --memory the plan is for a device of that size, which need not be this machine's.
  options.device = a.memory.empty() ? training_device(cfg) : parse_device(cfg.training.device);
  if (!a.memory.empty()) options.device_memory = parse_bytes(a.memory, "--memory");
  if (a.ranks < 1) throw InputError(fmt::format("--ranks {}: expected at least 1", a.ranks));
  options.ranks = a.ranks;
  options.local_ranks = options.device.is_cpu() ? a.ranks : 1;  // GPUs: one a rank
  const RunBatchPlan p = plan_run_batch(cfg, model_spec, data, max_length, options);
  const BatchChoice& c = p.choice;
  // Packed micro-batches are token budgets (train/memory_planner.h).
  const bool packed = p.target.packed;
  const int64_t unit = packed ? c.micro_tokens : c.micro_batch;
  const MemoryPlan off = plan_memory(p.target, unit, GradientCheckpointing::Off);
  const MemoryPlan on = plan_memory(p.target, unit, GradientCheckpointing::On);
  // What the budget holds beyond this run: micro-batches of rows x the longest sequence (packed:
  // token budgets), not the run's own cut of them.
  PlanTarget beyond_run = p.target;
  beyond_run.run.reset();
  const int64_t largest_off =
      largest_micro_batch(beyond_run, GradientCheckpointing::Off, c.budget, kSearchCap);
  const int64_t largest_on =
      largest_micro_batch(beyond_run, GradientCheckpointing::On, c.budget, kSearchCap);
  const auto split = [&](int64_t fit) {
    return fit > 0 ? split_effective_batch(c.effective_batch, fit) : std::pair<int64_t, int64_t>{};
  };

  if (a.json) {
    nlohmann::json j = {
        {"model", model.architecture},
        {"packing", {{"on", packed}, {"why", p.packing.why}}},
        {"micro_batch_tokens", packed ? nlohmann::json(c.micro_tokens) : nlohmann::json()},
        {"device", device_name(p.target.device)},
        {"threads", compute_threads()},
        {"precision", std::string(precision_name(p.precision.precision))},
        {"attention", attention_kernel_name(p.attention.kernel)},
        {"attention_reason", p.attention.reason},
        {"max_seq", p.target.max_seq},
        {"plan_lengths", std::string(choice_name(cfg.training.plan_lengths))},
        {"available_bytes", p.memory.available},
        {"memory_source", p.memory.source},
        {"budget_bytes", c.budget},
        {"budget_source", p.budget_source},
        {"host_reserve", p.host ? p.host->to_json() : nlohmann::json()},
        {"largest_micro_batch",
         {{"without_checkpointing", largest_off}, {"with_checkpointing", largest_on}}},
        {"effective_batch", c.effective_batch},
        {"micro_batch", c.micro_batch},
        {"gradient_accumulation", c.accumulation},
        {"gradient_checkpointing", gradient_checkpointing_name(c.checkpointing)},
        {"over_budget", c.over_budget},
        {"reason", c.reason},
        {"plan", plan_json(c.checkpointing == GradientCheckpointing::On ? on : off)},
        {"plan_without_checkpointing", plan_json(off)},
        {"plan_with_checkpointing", plan_json(on)}};
    if (a.ranks > 1) {
      j["ranks"] = a.ranks;  // the plan above is each rank's
      j["reduction"] = reduction_json(p.target, cfg);
    }
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << fmt::format(
      "{} ({} labels, {:.1f}M parameters{}), {} on {}\n"
      "longest sequence {} tokens ({}; data.max_length {})\n"
      "memory: {} available ({}), budget {} = {}\n{}{}\n",
      model.architecture, model.num_labels(),
      parameter_count(p.target) / 1e6,
      cfg.peft.enabled() ? fmt::format(", {}", peft_method_name(cfg.peft.method)) : "",
      precision_name(p.precision.precision), device_name(p.target.device), p.target.max_seq,
      cfg.training.plan_lengths == PlanLengths::Data ? "the data's, after tokenization"
                                                     : "planned for data.max_length",
      max_length, format_bytes(p.memory.available), p.memory.source, format_bytes(c.budget),
      p.budget_source,
      p.target.device.is_cpu()
          ? std::string()
          : fmt::format("attention kernel {} ({})\n", attention_kernel_name(p.attention.kernel),
                        p.attention.reason),
      a.ranks <= 1 ? std::string() : [&] {
        const nlohmann::json r = reduction_json(p.target, cfg);
        return fmt::format(
            "data-parallel: {} ranks; the plan below is each rank's ({} rows of each step "
            "batch of {}{}); gradients summed in place in {} buckets of at most {:g} MiB, {} per "
            "step\n",
            a.ranks, c.effective_batch, cfg.effective_batch(),
            data.task.grouped()
                ? fmt::format(" query groups of {} rows, whole groups a rank", cfg.data.group_size)
                : std::string(),
            r["buckets"].get<size_t>(),
            cfg.training.reduce_bucket_mb, format_bytes(r["bytes_per_step"].get<size_t>()));
      }());
  const char* chosen_off = c.checkpointing == GradientCheckpointing::Off ? " *" : "";
  const char* chosen_on = c.checkpointing == GradientCheckpointing::On ? " *" : "";
  std::cout << fmt::format("micro-batch {}{}   {:>14} {:>14}\n",
                           packed ? fmt::format("of {} packed tokens (up to {} rows)",
                                                c.micro_tokens, off.rows)
                                  : fmt::format("{} x {} tokens", c.micro_batch, p.target.max_seq),
                           !packed && off.rows > c.micro_batch
                               ? fmt::format(" (eval {})", off.rows)
                               : "",
                           fmt::format("no ckpt{}", chosen_off),
                           fmt::format("ckpt{}", chosen_on));
  for (size_t i = 0; i < off.categories.size(); ++i)
    std::cout << fmt::format("  {:<24} {:>14} {:>14}   {}\n", off.categories[i].name,
                             format_bytes(off.categories[i].bytes),
                             format_bytes(on.categories[i].bytes), off.categories[i].note);
  std::cout << fmt::format("  {:<24} {:>14} {:>14}\n", "total (planned peak)",
                           format_bytes(off.total), format_bytes(on.total));
  if (off.planned_for)
    std::cout << fmt::format(
        "planned for the run's largest micro-batch (evaluation included): {} rows, {} tokens, "
        "longest row {}; the largest is {}\n",
        off.planned_for->rows, off.planned_for->tokens, off.planned_for->longest,
        off.planned_for->largest.describe());
  std::cout << "\n";
  if (packed) {
    std::cout << fmt::format(
        "largest packed micro-batch in the budget: {} tokens without gradient checkpointing, {} "
        "with it\nchosen: micro-batches of up to {} tokens ({} rows), at most {} per step, "
        "gradient checkpointing {}{}\n  {}\n",
        largest_off, largest_on, c.micro_tokens, c.micro_batch, c.accumulation,
        gradient_checkpointing_name(c.checkpointing),
        c.over_budget ? " (OVER BUDGET: the run will try, then halve)" : "", c.reason);
    return;
  }
  const auto [acc_off, micro_off] = split(largest_off);
  const auto [acc_on, micro_on] = split(largest_on);
  std::cout << fmt::format(
      "largest micro-batch in the budget: {} without gradient checkpointing, {} with it\n"
      "effective batch {}: {} without checkpointing, {} with it\n",
      largest_off, largest_on, c.effective_batch,
      largest_off ? fmt::format("{} x {}", micro_off, acc_off) : std::string("does not fit"),
      largest_on ? fmt::format("{} x {}", micro_on, acc_on) : std::string("does not fit"));
  std::cout << fmt::format("chosen: micro-batch {} x accumulation {}, gradient checkpointing {}{}\n"
                           "  {}\n",
                           c.micro_batch, c.accumulation,
                           gradient_checkpointing_name(c.checkpointing),
                           c.over_budget ? " (OVER BUDGET: the run will try, then halve)" : "",
                           c.reason);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* cmd =
      app.add_subcommand("plan", "Print the memory plan and the batch size a training run will use");
  cmd->add_option("--config", a->config, "YAML training configuration")->required();
  cmd->add_option("--memory", a->memory,
                  "Plan for a device with this much available memory (e.g. 24GiB) instead of "
                  "this machine's");
  cmd->add_flag("--json", a->json, "Print JSON instead of a table");
  cmd->add_option("--ranks", a->ranks,
                  "Plan each rank of a data-parallel run of this many ranks (on the CPU: all on "
                  "this machine, sharing its memory)");
  cmd->add_option("overrides", a->overrides, "section.key=value overrides of the configuration");
  cmd->callback([a] { run_plan(*a); });
}

}  // namespace ftune::cli
