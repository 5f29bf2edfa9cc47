// Data pipeline throughput on a real pair-classification set: WordNet (Debian wordnet-base)
// example sentences paired with their own gloss (label "yes") or another synset's ("no"), the
// GlossBERT formulation. Writes the set as CSV, TSV and JSONL into a temporary directory and
// measures, per format, read_dataset (reading + validation, rows/s and MB/s); then tokenization
// up front with the MiniLM WordPiece tokenizer (tokens/s on the compute pool); the cost of a
// batcher seek and of sequential batch(step) calls; then the batches of
// one epoch made directly and through the BatchPrefetcher behind a consumer that sleeps
// --step-us per batch (a host thread waiting for a GPU step), with the time the consumer waited for
// input.
//
//   data_pipeline_bench [--threads N] [--max-length L] [--batch B] [--step-us U] [--tokenizer DIR]
//
// The tokenizer defaults to tests/fixtures/tokenizers/minilm found through this file's path as
// the compiler saw it (run from the build directory, like tokenizer_bench).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "data/batcher.h"
#include "data/dataset.h"
#include "data/prefetcher.h"
#include "text/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Pair {
  std::string text, text_pair, label;
};

// (example sentence, gloss, yes/no) for every WordNet example sentence.
std::vector<Pair> wordnet_pairs() {
  struct Synset {
    std::string gloss;
    std::vector<std::string> examples;
  };
  std::vector<Synset> synsets;
  for (const char* pos : {"noun", "verb", "adj", "adv"}) {
    std::ifstream in(std::string("/usr/share/wordnet/data.") + pos);
    if (!in) throw ftune::InputError("/usr/share/wordnet missing: install wordnet-base");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("  ", 0) == 0) continue;  // license header
      const size_t bar = line.find('|');
      if (bar == std::string::npos) continue;
      Synset s;
      const std::string gloss = line.substr(bar + 1);
      size_t start = 0;
      for (bool first = true; start <= gloss.size(); first = false) {
        size_t end = gloss.find(';', start);
        if (end == std::string::npos) end = gloss.size();
        const std::string part = gloss.substr(start, end - start);
        start = end + 1;
        const size_t b = part.find_first_not_of(" \""), e = part.find_last_not_of(" \"");
        if (b == std::string::npos) continue;
        if (first)
          s.gloss = part.substr(b, e - b + 1);
        else if (part.find('"') != std::string::npos)
          s.examples.push_back(part.substr(b, e - b + 1));
      }
      if (!s.gloss.empty() && !s.examples.empty()) synsets.push_back(std::move(s));
    }
  }
  std::mt19937_64 rng(1);
  std::vector<Pair> pairs;
  for (size_t i = 0; i < synsets.size(); ++i)
    for (const std::string& ex : synsets[i].examples) {
      pairs.push_back({ex, synsets[i].gloss, "yes"});
      pairs.push_back({ex, synsets[rng() % synsets.size()].gloss, "no"});
    }
  return pairs;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0;
  int64_t max_length = 128, batch = 32, step_us = 1000;
  std::string tok_dir =
      fs::path(__FILE__).parent_path().parent_path().string() + "/tests/fixtures/tokenizers/minilm";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--threads")
      threads = std::stoi(v);
    else if (a == "--max-length")
      max_length = std::stoll(v);
    else if (a == "--batch")
      batch = std::stoll(v);
    else if (a == "--step-us")
      step_us = std::stoll(v);
    else if (a == "--tokenizer")
      tok_dir = v;
  }
  try {
    if (argc % 2 == 0) throw ftune::InputError("options come in pairs: --name value");
    ftune::set_compute_threads(threads);
    const std::vector<Pair> pairs = wordnet_pairs();
    const fs::path dir =
        fs::temp_directory_path() / ("ftune_data_bench_" + std::to_string(getpid()));
    fs::create_directories(dir);
    {
      std::ofstream csv(dir / "pairs.csv"), tsv(dir / "pairs.tsv"), jsonl(dir / "pairs.jsonl");
      csv << "text,text_pair,label\n";
      tsv << "text\ttext_pair\tlabel\n";
      for (const Pair& p : pairs) {
        csv << csv_field(p.text) << ',' << csv_field(p.text_pair) << ',' << p.label << '\n';
        tsv << p.text << '\t' << p.text_pair << '\t' << p.label << '\n';
        jsonl << nlohmann::json{{"text", p.text}, {"text_pair", p.text_pair}, {"label", p.label}}
                     .dump()
              << '\n';
      }
    }
    std::printf("WordNet gloss pairs: %zu rows, %d compute threads\n", pairs.size(),
                ftune::compute_threads());
    std::printf("%-6s %10s %10s %12s %10s\n", "format", "MB", "seconds", "rows/s", "MB/s");
    ftune::data::RawDataset ds;
    ftune::data::DatasetReport report;
    for (const char* name : {"pairs.csv", "pairs.tsv", "pairs.jsonl"}) {
      ftune::data::DataSpec spec;
      spec.path = (dir / name).string();
      const double mb = fs::file_size(spec.path) / 1e6;
      report = ftune::data::read_dataset(spec, &ds);
      std::printf("%-6s %10.1f %10.3f %12.0f %10.1f\n", report.format.c_str(), mb,
                  report.read_seconds, report.rows / report.read_seconds, mb / report.read_seconds);
    }
    const ftune::text::Tokenizer tok = ftune::text::Tokenizer::from_dir(tok_dir);
    const auto examples = ftune::data::tokenize_dataset(tok, ds, max_length, &report);
    std::printf(
        "tokenize (MiniLM, max_length %lld): %lld tokens in %.3f s = %.0f tokens/s, "
        "%lld truncated, longest %lld\n",
        (long long)max_length, (long long)report.tokenize.tokens, report.tokenize.seconds,
        report.tokenize.tokens_per_second(), (long long)report.tokenize.truncated,
        (long long)report.tokenize.longest);

    ftune::data::LengthBucketedBatcher batcher(&examples, batch, 42);
    const int64_t steps = batcher.batches_per_epoch();
    // The consumer's training step: the host thread waits (as it does for a GPU step).
    auto step = [&] { std::this_thread::sleep_for(std::chrono::microseconds(step_us)); };
    auto t0 = Clock::now();
    {
      ftune::data::LengthBucketedBatcher seeker(&examples, batch, 42);
      seeker.batch(1000 * steps + 17);  // one epoch permutation, wherever the step
      const double seek = since(t0);
      t0 = Clock::now();
      for (int64_t s = 1000 * steps + 18; s < 1001 * steps; ++s) seeker.batch(s);
      std::printf("batch(step): seek to epoch 1000 %.1f ms, then %.3f us per sequential step\n",
                  1e3 * seek, 1e6 * since(t0) / (steps - 18));
    }
    t0 = Clock::now();
    double make_seconds = 0;
    for (int64_t s = 0; s < steps; ++s) {
      const auto t = Clock::now();
      const ftune::Batch b = ftune::data::make_batch(examples, batcher.batch(s), 0);
      make_seconds += since(t);
      step();
    }
    const double direct = since(t0);
    t0 = Clock::now();
    ftune::data::BatchPrefetcher prefetcher(
        ftune::data::BatchPrefetcher::training_batches(batcher, &examples, 0), 0, steps);
    while (!prefetcher.done()) {
      const ftune::Batch b = prefetcher.next();
      step();
    }
    const double prefetched = since(t0);
    std::printf(
        "epoch of %lld batches of %lld, consumer step %lld us: direct %.3f s (%.1f us "
        "per make_batch), prefetched %.3f s (waited %.4f s for input)\n",
        (long long)steps, (long long)batch, (long long)step_us, direct, 1e6 * make_seconds / steps,
        prefetched, prefetcher.wait_seconds());
    fs::remove_all(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
