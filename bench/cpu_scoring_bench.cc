// ftune's side of the CPU scoring comparison (bench/cpu_scoring.py, issue 39): TextScorer::score
// (what `ftune predict` and ftune.Model.predict run) over every pair of a JSONL file, timed over
// several passes, with the CPU GEMM library and the scoring precision in use. Prints one JSON line
// (pairs/s of each pass, their median, the settings); --profile adds the per-op time of one
// pass (the FTUNE_PROFILE_OPS table, on stderr and in the JSON); --logits FILE writes the logits
// (one row a line) for the accuracy comparisons; --ab alternates passes with the packed weights
// (ops/cpu_matmul.h) and without (the plain GEMM), pass by pass, and reports both.
//
//   cpu_scoring_bench MODEL_DIR PAIRS.jsonl [--threads N] [--batch-size B] [--repeats R]
//                     [--max-length L] [--profile] [--logits FILE]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/blas_buffers.h"
#include "core/device.h"
#include "core/op_profile.h"
#include "core/thread_pool.h"
#include "models/text_scorer.h"
#include "ops/cpu_gemm_library.h"
#include "ops/cpu_matmul.h"


int main(int argc, char** argv) {
  ftune::reexec_with_blas_settings(argv);  // OpenBLAS as `ftune` runs it (core/blas_buffers.h)
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s MODEL_DIR PAIRS.jsonl [--threads N] [--batch-size B] [--repeats R] "
                 "[--max-length L] [--profile] [--logits FILE]\n",
                 argv[0]);
    return 2;
  }
  int threads = 2, repeats = 5;
  int64_t batch_size = 32, max_length = 0;
  bool profile = false, ab = false;
  std::string logits_path;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--threads") threads = std::stoi(next());
    else if (a == "--batch-size") batch_size = std::stoll(next());
    else if (a == "--repeats") repeats = std::stoi(next());
    else if (a == "--max-length") max_length = std::stoll(next());
    else if (a == "--profile") profile = true;
    else if (a == "--ab") ab = true;
    else if (a == "--logits") logits_path = next();
    else throw std::runtime_error("unknown option " + a);
  }
  ftune::set_compute_threads(threads);
  std::vector<ftune::text::TextPair> pairs;
  std::ifstream in(argv[2]);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    pairs.push_back({j.at("text").get<std::string>(), j.at("text_pair").get<std::string>()});
  }
  ftune::TextScorer scorer(argv[1], ftune::Device::cpu(),
                           max_length > 0 ? std::optional<int64_t>(max_length) : std::nullopt);
  std::vector<float> logits(pairs.size() * static_cast<size_t>(scorer.num_labels()));
  scorer.score(pairs, batch_size, logits.data());  // the arena grows, primitives are made
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  std::vector<double> rates, plain_rates;
  const bool packed_on = ftune::cpu::packed_matmul_enabled();
  if (ab) {  // the plain path's first pass, untimed (its arena is the same)
    ftune::cpu::set_packed_matmul_enabled(false);
    scorer.score(pairs, batch_size, logits.data());
  }
  for (int r = 0; r < repeats; ++r) {
    for (const bool plain : {false, true}) {
      if (plain && !ab) continue;
      ftune::cpu::set_packed_matmul_enabled(plain ? false : packed_on);
      const auto t0 = std::chrono::steady_clock::now();
      scorer.score(pairs, batch_size, logits.data());
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
      (plain ? plain_rates : rates).push_back(static_cast<double>(pairs.size()) / dt.count());
    }
  }
  ftune::cpu::set_packed_matmul_enabled(packed_on);
  nlohmann::json out;
  if (ab) {
    out["plain_pairs_per_s"] = plain_rates;
    out["plain_median_pairs_per_s"] = median(plain_rates);
  }
  out["pairs"] = pairs.size();
  out["threads"] = threads;
  out["batch_size"] = batch_size;
  out["pairs_per_s"] = rates;
  out["median_pairs_per_s"] = median(rates);
  out["cpu_gemm"] = ftune::cpu::gemm_library_description();
  out["matmul"] = ftune::cpu::matmul_description();
  const char* precision = std::getenv("FTUNE_SCORING_PRECISION");
  out["precision"] = precision && *precision ? precision : "fp32";

  if (profile) {
    auto recorder = ftune::profile::StepRecorder::always(1, ftune::Device::cpu());
    scorer.score(pairs, batch_size, logits.data());
    const ftune::profile::StepProfile p = recorder.finish();
    std::fprintf(stderr, "%s\n", p.table(30).c_str());
    out["profile"] = p.to_json();
  }
  if (!logits_path.empty()) {
    std::ofstream f(logits_path);
    const int64_t k = scorer.num_labels();
    for (size_t i = 0; i < pairs.size(); ++i) {
      for (int64_t j = 0; j < k; ++j) f << fmt::format("{}{:.9g}", j ? " " : "", logits[i * k + j]);
      f << "\n";
    }
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
