// Tokenizer throughput: MB/s and sentences/s of ftune's encode on one thread and on all threads,
// for each tokenizer, on WordNet's glosses and examples (Debian wordnet-base). bench/
// hf_tokenizer_bench.py measures HF tokenizers (Rust, through its Python batch API) on the same
// corpus file and tokenizer files and prints both side by side.
//
//   tokenizer_bench [--corpus FILE] [--write-corpus FILE] [--json OUT] [--threads N]
//                   [--seconds S] [name=PATH ...]
//
// One-thread numbers use the process CPU time (robust on a shared machine, and what the Python
// side measures with time.process_time()); all-thread numbers use wall time.
//
// Without --corpus the corpus is built from /usr/share/wordnet (--write-corpus saves it, one
// sentence per line, for the Python side). Without tokenizer arguments: the committed fixtures
// (MiniLM WordPiece, cased WordPiece, RoBERTa-style BPE, Unigram) and, when ../shared is
// present, Gemma-3, Llama-2 and Llama-3.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "text/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

std::vector<std::string> wordnet_corpus() {
  std::vector<std::string> out;
  for (const char* pos : {"noun", "verb", "adj", "adv"}) {
    std::ifstream in(std::string("/usr/share/wordnet/data.") + pos);
    if (!in)
      throw ftune::InputError("/usr/share/wordnet missing: install wordnet-base or pass --corpus");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("  ", 0) == 0) continue;  // license header
      const size_t bar = line.find('|');
      if (bar == std::string::npos) continue;
      std::string gloss = line.substr(bar + 1);
      // "definition; "example"; "example"": split on ';'.
      size_t start = 0;
      bool first = true;
      while (start <= gloss.size()) {
        size_t end = gloss.find(';', start);
        if (end == std::string::npos) end = gloss.size();
        std::string part = gloss.substr(start, end - start);
        const size_t b = part.find_first_not_of(" \"");
        const size_t e = part.find_last_not_of(" \"");
        if (b != std::string::npos && (first || part.find('"') != std::string::npos))
          out.push_back(part.substr(b, e - b + 1));
        first = false;
        start = end + 1;
      }
    }
  }
  return out;
}

// The repository root (this file is bench/tokenizer_bench.cc; CMake compiles it by absolute path).
std::string source_dir() {
  return std::filesystem::path(__FILE__).parent_path().parent_path().string();
}

struct Result {
  std::string name;
  double mb_s_1 = 0, sent_s_1 = 0, mb_s_n = 0, sent_s_n = 0;
  size_t tokens = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string corpus_path, write_corpus, json_out;
  double seconds = 3.0;
  int threads = 0;
  std::vector<std::pair<std::string, std::string>> specs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "--corpus")
      corpus_path = next();
    else if (a == "--write-corpus")
      write_corpus = next();
    else if (a == "--json")
      json_out = next();
    else if (a == "--seconds")
      seconds = std::stod(next());
    else if (a == "--threads")
      threads = std::stoi(next());
    else if (a.find('=') != std::string::npos)
      specs.emplace_back(a.substr(0, a.find('=')), a.substr(a.find('=') + 1));
    else {
      std::fprintf(stderr,
                   "usage: %s [--corpus FILE] [--write-corpus FILE] [--json OUT] [--threads N] "
                   "[--seconds S] [name=PATH ...]\n",
                   argv[0]);
      return 1;
    }
  }
  try {
    std::vector<std::string> corpus;
    if (!corpus_path.empty()) {
      std::ifstream in(corpus_path);
      if (!in) throw ftune::InputError(corpus_path + ": cannot open");
      for (std::string line; std::getline(in, line);) corpus.push_back(line);
    } else {
      corpus = wordnet_corpus();
    }
    if (!write_corpus.empty()) {
      std::ofstream out(write_corpus);
      for (const auto& s : corpus) out << s << '\n';
    }
    size_t bytes = 0;
    for (const auto& s : corpus) bytes += s.size();

    if (specs.empty()) {
      const std::string fx = source_dir() + "/tests/fixtures/tokenizers";
      for (const char* n : {"minilm", "wordpiece_cased", "roberta_bpe", "unigram_precompiled"})
        specs.emplace_back(n, fx + "/" + n);
      std::string shared = std::getenv("FTUNE_SHARED_DIR") ? std::getenv("FTUNE_SHARED_DIR")
                                                           : source_dir() + "/../shared";
      for (const char* n : {"llama2", "llama3", "gemma3"}) {
        const std::string p = shared + "/fixtures/tokenizers/" + n + ".tokenizer.json";
        if (std::filesystem::exists(p)) specs.emplace_back(n, p);
      }
    }
    if (threads > 0) ftune::set_compute_threads(threads);
    const int n_threads = ftune::compute_pool().num_threads();
    std::printf("corpus: %zu sentences, %.2f MB; threads: %d\n", corpus.size(), bytes / 1e6,
                n_threads);

    std::vector<ftune::text::TextPair> batch;
    batch.reserve(corpus.size());
    for (const auto& s : corpus) batch.push_back({s, std::nullopt});

    std::vector<Result> results;
    for (const auto& [name, path] : specs) {
      const auto tok = ftune::text::Tokenizer::from_path(path);
      const auto options = tok.default_options();
      Result r;
      r.name = name;
      // One thread: encode() sentence by sentence, whole passes over the corpus.
      {
        size_t passes = 0, tokens = 0;
        const double t0 = cpu_seconds();
        double elapsed = 0;
        do {
          for (const auto& s : corpus) tokens += tok.encode(s, std::nullopt, options).ids.size();
          ++passes;
          elapsed = cpu_seconds() - t0;
        } while (elapsed < seconds);
        r.tokens = tokens / passes;
        r.mb_s_1 = bytes * passes / elapsed / 1e6;
        r.sent_s_1 = corpus.size() * passes / elapsed;
      }
      // All threads: encode_batch over the whole corpus.
      {
        size_t passes = 0;
        const auto t0 = Clock::now();
        double elapsed = 0;
        do {
          const auto out = tok.encode_batch(batch, options);
          ++passes;
          elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
        } while (elapsed < seconds);
        r.mb_s_n = bytes * passes / elapsed / 1e6;
        r.sent_s_n = corpus.size() * passes / elapsed;
      }
      std::printf(
          "  %-20s 1 thread %7.2f MB/s %9.0f sent/s | %2d threads %7.2f MB/s %9.0f sent/s | %zu "
          "tokens\n",
          name.c_str(), r.mb_s_1, r.sent_s_1, n_threads, r.mb_s_n, r.sent_s_n, r.tokens);
      std::fflush(stdout);
      results.push_back(r);
    }
    if (!json_out.empty()) {
      std::ofstream out(json_out);
      out << "{\"threads\": " << n_threads << ", \"sentences\": " << corpus.size()
          << ", \"bytes\": " << bytes << ", \"results\": [";
      for (size_t i = 0; i < results.size(); ++i) {
        const Result& r = results[i];
        out << (i ? ", " : "") << "{\"name\": \"" << r.name << "\", \"mb_s_1\": " << r.mb_s_1
            << ", \"sent_s_1\": " << r.sent_s_1 << ", \"mb_s_n\": " << r.mb_s_n
            << ", \"sent_s_n\": " << r.sent_s_n << ", \"tokens\": " << r.tokens << "}";
      }
      out << "]}\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 2;
  }
  return 0;
}
