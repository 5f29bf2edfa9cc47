// ftune's side of the CPU scoring comparison (bench/cpu_scoring.py, issue 39): TextScorer::score
// (what `ftune predict` and ftune.Model.predict run) over every pair of a JSONL file, timed over
// several passes, with the CPU GEMM library and the scoring precision in use. Prints one JSON line
// (pairs/s of each pass, their median, the settings); --profile adds the per-op time of one
// pass (the FTUNE_PROFILE_OPS table, on stderr and in the JSON); --logits FILE writes the logits
// (one row a line) for the accuracy comparisons.
//
//   cpu_scoring_bench MODEL_DIR PAIRS.jsonl [--threads N] [--batch-size B] [--repeats R]
//                     [--max-length L] [--profile] [--logits FILE]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
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
  bool profile = false;
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
  std::vector<double> rates;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    scorer.score(pairs, batch_size, logits.data());
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    rates.push_back(static_cast<double>(pairs.size()) / dt.count());
  }
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  nlohmann::json out;
  out["pairs"] = pairs.size();
  out["threads"] = threads;
  out["batch_size"] = batch_size;
  out["pairs_per_s"] = rates;
  out["median_pairs_per_s"] = sorted[sorted.size() / 2];
  out["cpu_gemm"] = ftune::cpu::gemm_library_description();

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
