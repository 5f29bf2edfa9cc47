// The C++ side of the Python package's overhead measurement (bench/python_package_bench.py):
// TextScorer::score (models/text_scorer.h, what ftune.Model.predict calls) on the first rows of a
// JSONL file of {"text", "text_pair"} pairs, in calls of 1 and 8 rows, each repeated; prints the
// median microseconds a call as JSON. The Python script times m.predict on the same rows, and
// the difference is what the binding costs (argument conversion, GIL release, the NumPy result).
//
//   text_scorer_bench MODEL_DIR PAIRS.jsonl [REPEATS=200] [THREADS=2]
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
#include "core/thread_pool.h"
#include "models/text_scorer.h"

int main(int argc, char** argv) {
  ftune::reexec_with_blas_settings(argv);  // OpenBLAS as `ftune` runs it (core/blas_buffers.h)
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL_DIR PAIRS.jsonl [REPEATS] [THREADS]\n", argv[0]);
    return 2;
  }
  const int repeats = argc > 3 ? std::stoi(argv[3]) : 200;
  ftune::set_compute_threads(argc > 4 ? std::stoi(argv[4]) : 2);
  std::vector<ftune::text::TextPair> pairs;
  std::ifstream in(argv[2]);
  for (std::string line; std::getline(in, line) && pairs.size() < 8;) {
    const auto j = nlohmann::json::parse(line);
    pairs.push_back({j.at("text").get<std::string>(), j.at("text_pair").get<std::string>()});
  }
  ftune::TextScorer scorer(argv[1], ftune::Device::cpu());
  nlohmann::json out;
  for (const size_t rows : {size_t{1}, size_t{8}}) {
    const std::vector<ftune::text::TextPair> batch(pairs.begin(), pairs.begin() + rows);
    std::vector<float> logits(rows * static_cast<size_t>(scorer.num_labels()));
    std::vector<double> us;
    for (int r = 0; r < repeats + 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      scorer.score(batch, 32, logits.data());
      const std::chrono::duration<double, std::micro> dt = std::chrono::steady_clock::now() - t0;
      if (r >= 5) us.push_back(dt.count());  // the first calls grow the arena
    }
    std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
    out[fmt::format("rows_{}_median_us", rows)] = us[us.size() / 2];
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
