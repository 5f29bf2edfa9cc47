// The memory planner in real runs: `ftune plan` prints and emits the plan; `training.batch_size:
// auto` trains with the planned micro-batch and accumulation inside the budget; the arena a run
// allocates is what it uses (planned vs touched bytes within 2%, the CPU high-water mark); an
// allocation that fails anyway halves the micro-batch, doubles accumulation and gives exactly the
// run started with the smaller micro-batch; bad batch keys are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

class MemoryPlanRun : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.path() + "/tiny";
    write_tiny_bert(model_);
    write_pair_task(tmp_.path() + "/train.jsonl", 192, 1);
    write_pair_task(tmp_.path() + "/val.jsonl", 48, 2);
  }
  // Effective batch 16 by default, auto micro-batch; `extra` adds training keys.
  // Padded micro-batches (rows x longest row), whose cuts and plan these tests pin; packed ones
  // (data.packing on) are tested in packing_test.cc.
  std::string config(const std::string& name, const std::string& extra = "") {
    const std::string path = tmp_.path() + "/" + name + ".yaml";
    std::ofstream(path) << "model:\n  path: " << model_ << "\ndata:\n  train: " << tmp_.path()
                        << "/train.jsonl\n  validation: " << tmp_.path()
                        << "/val.jsonl\n  max_length: 24\n  packing: off\n"
                        << "training:\n  epochs: 1\n  learning_rate: 3.0e-3\n  log_every: 1\n"
                        << "  threads: 2\n  effective_batch_size: 16\n"
                        << (extra.find("memory_budget") == std::string::npos
                                ? "  memory_budget: 1GiB\n"
                                : "")
                        << extra << "output:\n  dir: " << tmp_.path() << "/" << name << "\n";
    return path;
  }
  // stdout alone is the JSON document (log lines go to stderr).
  nlohmann::json plan(const std::string& cfg, const std::string& args = "") {
    const CliResult r = run_ftune("plan --json --config " + cfg + " " + args, "", Streams::kStdout);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "stdout is not JSON alone:\n" << r.output;
    return j;
  }
  nlohmann::json summary(const std::string& name) {
    return nlohmann::json::parse(std::ifstream(tmp_.path() + "/" + name + "/summary.json"));
  }
  std::vector<double> train_losses(const std::string& name) {
    return logged_train_losses(tmp_.path() + "/" + name);
  }
  TempDir tmp_;
  std::string model_;
};

TEST_F(MemoryPlanRun, PlanCommandPrintsTheBreakdownAndTheChoice) {
  const std::string cfg = config("p");
  const CliResult r = run_ftune("plan --config " + cfg);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"parameters", "optimizer state", "activations", "attention",
                        "total (planned peak)", "largest micro-batch in the budget",
                        "chosen: micro-batch 16 x accumulation 1"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;

  const nlohmann::json j = plan(cfg);
  EXPECT_EQ(j["effective_batch"], 16);
  EXPECT_EQ(j["micro_batch"], 16);
  EXPECT_EQ(j["gradient_accumulation"], 1);
  EXPECT_EQ(j["budget_bytes"], size_t{1} << 30);
  EXPECT_LE(j["max_seq"].get<int64_t>(), 24);
  size_t sum = 0;
  for (const auto& c : j["plan"]["categories"]) sum += c["bytes"].get<size_t>();
  EXPECT_EQ(sum, j["plan"]["total_bytes"].get<size_t>());
  EXPECT_GT(j["largest_micro_batch"]["with_checkpointing"].get<int64_t>(),
            j["largest_micro_batch"]["without_checkpointing"].get<int64_t>());

  // A device with room for about 5 rows: the effective batch is reached by accumulation.
  const nlohmann::json one = plan(cfg, "training.batch_size=1 training.gradient_checkpointing=off");
  const nlohmann::json two = plan(cfg, "training.batch_size=2 training.gradient_checkpointing=off");
  const size_t row = two["plan"]["total_bytes"].get<size_t>() -
                     one["plan"]["total_bytes"].get<size_t>();
  const size_t room = one["plan"]["total_bytes"].get<size_t>() + 4 * row + row / 2;
  const nlohmann::json small =
      plan(cfg, fmt::format("training.memory_budget={} training.gradient_checkpointing=off", room));
  EXPECT_EQ(small["micro_batch"], 4);
  EXPECT_EQ(small["gradient_accumulation"], 4);
  EXPECT_LE(small["plan"]["total_bytes"].get<size_t>(), room);
  // --memory plans for another device: the budget is its memory_fraction.
  const nlohmann::json other = plan(cfg, "--memory 10GiB training.memory_budget=null");
  EXPECT_EQ(other["budget_bytes"].get<size_t>(), static_cast<size_t>(0.95 * (size_t{10} << 30)));
}

TEST_F(MemoryPlanRun, CpuBudgetLeavesTheProcessWhatItNeedsOutsideTheArena) {
  // memory_fraction 1: the budget still leaves the process's mapped files (which MemAvailable
  // counts as free) and what the run adds after planning; the run's own measure of what it added
  // outside the arena (its anonymous memory at the end, less at planning, less the arena) stays
  // within the planned estimate.
  const std::string cfg = config("host", "  memory_fraction: 1.0\n  memory_budget: null\n");
  const nlohmann::json p = plan(cfg);
  ASSERT_TRUE(p["host_reserve"].is_object()) << p.dump(2);
  const nlohmann::json& h = p["host_reserve"];
  EXPECT_GT(h["rss_at_plan_bytes"].get<size_t>(), 0u);
  EXPECT_GT(h["after_plan_bytes"].get<size_t>(), 0u);
  EXPECT_EQ(p["budget_bytes"].get<size_t>(),
            p["available_bytes"].get<size_t>() - h["reserve_bytes"].get<size_t>());
  if (p["memory_source"] == "/proc/meminfo")
    EXPECT_EQ(h["unaccounted_rss_bytes"], h["rss_file_at_plan_bytes"]);
  const CliResult r = run_ftune("train --config " + cfg + " training.max_steps=4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json m = summary("host")["memory"];
  const nlohmann::json& host = m["host"];
  const double added = host["rss_anon_at_end_bytes"].get<double>() -
                       host["rss_anon_at_plan_bytes"].get<double>() -
                       m["planned_bytes"].get<double>();
  EXPECT_LE(added, host["after_plan_bytes"].get<double>()) << m.dump(2);
}

TEST_F(MemoryPlanRun, PlanUsesTheRunsThreadCount) {
  // The CPU kernels' scratch is per compute thread: `ftune plan` sizes it for training.threads,
  // as the run does, and its total is the arena the run allocates.
  const std::string cfg = config("threads", "  batch_size: 8\n");
  const nlohmann::json one = plan(cfg, "training.threads=1");
  const nlohmann::json two = plan(cfg, "training.threads=2");
  EXPECT_EQ(one["threads"], 1);
  EXPECT_EQ(two["threads"], 2);
  EXPECT_LT(one["plan"]["total_bytes"].get<size_t>(), two["plan"]["total_bytes"].get<size_t>());
  const CliResult r =
      run_ftune("train --config " + cfg + " training.threads=1 training.max_steps=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(summary("threads")["memory"]["planned_bytes"], one["plan"]["total_bytes"]);
}

TEST_F(MemoryPlanRun, AutoBatchTrainsInsideTheBudgetAndThePlanIsWhatTheRunUses) {
  // Room for about 6 rows of the 16 of the effective batch: 3 x 6 (the planner splits evenly).
  const std::string probe = config("probe");
  const nlohmann::json one = plan(probe, "training.batch_size=1 training.gradient_checkpointing=off");
  const nlohmann::json two = plan(probe, "training.batch_size=2 training.gradient_checkpointing=off");
  const size_t row = two["plan"]["total_bytes"].get<size_t>() -
                     one["plan"]["total_bytes"].get<size_t>();
  const size_t budget = one["plan"]["total_bytes"].get<size_t>() + 5 * row + row / 2;
  // 6 rows fit (one + 5 more), not 7.
  const std::string cfg = config(
      "auto", fmt::format("  memory_budget: {}\n  gradient_checkpointing: off\n", budget));
  const CliResult r = run_ftune("train --config " + cfg);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("memory plan:"), std::string::npos) << r.output;
  const nlohmann::json s = summary("auto");
  EXPECT_EQ(s["micro_batch"], 6);
  EXPECT_EQ(s["gradient_accumulation"], 3);
  EXPECT_EQ(s["effective_batch"], 16);
  const nlohmann::json& m = s["memory"];
  EXPECT_LE(m["planned_bytes"].get<size_t>(), budget);
  EXPECT_EQ(m["budget_bytes"].get<size_t>(), budget);
  EXPECT_EQ(m["oom_retries"].size(), 0u);
  // Planned vs touched (the arena's high-water mark, per buffer) within 2%, in total and for the
  // activations alone: the plan holds no unused room.
  const double planned = m["planned_bytes"].get<double>(), touched = m["touched_bytes"].get<double>();
  EXPECT_LE(touched, planned);
  EXPECT_GT(touched, 0.98 * planned) << m.dump(2);
  for (const char* c : {"activations", "attention", "activation gradients"}) {
    const double p = m["planned"][c].get<double>(), t = m["touched"][c].get<double>();
    EXPECT_GT(t, 0.98 * p) << c << "\n" << m.dump(2);
  }
}

TEST_F(MemoryPlanRun, PlannedMatchesTouchedWithCheckpointingAndAdapters) {
  const std::string cfg = config(
      "lora", "  gradient_checkpointing: on\npeft:\n  method: lora\n  r: 4\n  dropout: 0.1\n");
  const CliResult r = run_ftune("train --config " + cfg);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json s = summary("lora");
  const nlohmann::json& m = s["memory"];
  const double planned = m["planned_bytes"].get<double>(), touched = m["touched_bytes"].get<double>();
  EXPECT_LE(touched, planned);
  EXPECT_GT(touched, 0.98 * planned) << m.dump(2);
  EXPECT_GT(m["touched"]["activations"].get<double>(),
            0.98 * m["planned"]["activations"].get<double>())
      << m.dump(2);
}

TEST_F(MemoryPlanRun, FailedAllocationHalvesTheMicroBatchAndMatchesTheSmallerRun) {
  const std::string probe = config("probe");
  const size_t p16 = plan(probe, "training.batch_size=16 training.gradient_checkpointing=off")
                         ["plan"]["total_bytes"].get<size_t>();
  const size_t p8 = plan(probe, "training.batch_size=8 training.gradient_checkpointing=off")
                        ["plan"]["total_bytes"].get<size_t>();
  ASSERT_LT(p8, p16);
  // The planner sees 1 GiB, but only room for micro-batch 8 is really there.
  const std::string oom = config("oom", "  gradient_checkpointing: off\n");
  const CliResult a =
      run_ftune("train --config " + oom, fmt::format("FTUNE_DEBUG_ARENA_MEMORY={}", (p8 + p16) / 2));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(a.output.find("out of memory allocating"), std::string::npos) << a.output;
  const nlohmann::json s = summary("oom");
  EXPECT_EQ(s["micro_batch"], 8);
  EXPECT_EQ(s["gradient_accumulation"], 2);
  EXPECT_EQ(s["effective_batch"], 16);
  ASSERT_EQ(s["memory"]["oom_retries"].size(), 1u);
  EXPECT_EQ(s["memory"]["oom_retries"][0]["micro_batch"], 16);

  const std::string small =
      config("small", "  batch_size: 8\n  gradient_accumulation: 2\n  gradient_checkpointing: off\n");
  const CliResult b = run_ftune("train --config " + small);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(train_losses("oom"), train_losses("small"));
  EXPECT_EQ(file_bytes(tmp_.path() + "/oom/model/model.safetensors"),
            file_bytes(tmp_.path() + "/small/model/model.safetensors"));

  // Not even one row fits: a clear error, exit code 2... from the allocation itself.
  const CliResult c = run_ftune("train --config " + config("none"), "FTUNE_DEBUG_ARENA_MEMORY=1000");
  EXPECT_NE(c.exit_code, 0);
  EXPECT_NE(c.output.find("not even a micro-batch of one sequence"), std::string::npos) << c.output;
}

TEST_F(MemoryPlanRun, AllocationFailureMidRunRebuildsASmallerArenaAndKeepsTheTrajectory) {
  const std::string probe = config("probe");
  const size_t p8 = plan(probe, "training.batch_size=8 training.gradient_checkpointing=off")
                        ["plan"]["total_bytes"].get<size_t>();
  const std::string cfg = config("mid", "  gradient_checkpointing: off\n");
  const CliResult a = run_ftune("train --config " + cfg, "FTUNE_DEBUG_OOM_AT_STEP=3");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(a.output.find("out of memory at step 3"), std::string::npos) << a.output;
  const nlohmann::json s = summary("mid");
  EXPECT_EQ(s["micro_batch"], 8);
  EXPECT_EQ(s["gradient_accumulation"], 2);
  EXPECT_EQ(s["steps"], 12);  // 192 rows / 16: no step lost or repeated
  ASSERT_EQ(s["memory"]["oom_retries"].size(), 1u);
  EXPECT_EQ(s["memory"]["oom_retries"][0]["step"], 3);
  EXPECT_EQ(s["memory"]["planned_bytes"].get<size_t>(), p8);  // the arena was rebuilt smaller

  // A run started with micro-batch 8: the same trajectory up to float summation order (steps 1
  // and 2 ran 16 rows at once in the first run).
  const std::string small =
      config("small8", "  batch_size: 8\n  gradient_accumulation: 2\n  gradient_checkpointing: off\n");
  const CliResult b = run_ftune("train --config " + small);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const std::vector<double> la = train_losses("mid"), lb = train_losses("small8");
  ASSERT_EQ(la.size(), lb.size());
  ASSERT_EQ(la.size(), 12u);
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-5 * std::fabs(lb[i])) << i;
  const double ea = s["final_eval"]["loss"].get<double>(),
               eb = summary("small8")["final_eval"]["loss"].get<double>();
  EXPECT_NEAR(ea, eb, 1e-4 * eb);
}

TEST_F(MemoryPlanRun, BadBatchKeysAreClearErrors) {
  struct Case {
    const char* extra;
    const char* message;
  };
  for (const Case& c : {
           Case{"  gradient_accumulation: 2\n", "'training.gradient_accumulation' is chosen by"},
           Case{"  batch_size: 8\n  gradient_accumulation: 3\n",
                "give two of the three"},
           Case{"  batch_size: 6\n", "must be a multiple"},
           Case{"  batch_size: many\n", "'training.batch_size' must be an integer or auto"},
           Case{"  batch_size: 0\n", "'training.batch_size' must be at least 1 or auto"},
           Case{"  memory_budget: lots\n", "'training.memory_budget' must be a positive size"},
           Case{"  memory_fraction: 1.5\n", "'training.memory_fraction' must be in (0, 1]"},
           Case{"  plan_lengths: worst\n", "'training.plan_lengths' must be one of data, max_length"},
           Case{"  gradient_checkpointing: maybe\n", "must be off, on or auto"},
       }) {
    const CliResult r = run_ftune("plan --config " + config("bad", c.extra));
    EXPECT_EQ(r.exit_code, 2) << c.extra << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.extra << r.output;
    EXPECT_NE(r.output.find("bad.yaml"), std::string::npos) << r.output;
  }
  const CliResult m = run_ftune("plan --memory 12parsecs --config " + config("p"));
  EXPECT_EQ(m.exit_code, 2) << m.output;
  EXPECT_NE(m.output.find("--memory must be a positive size"), std::string::npos) << m.output;
}

}  // namespace
}  // namespace ftune::test
