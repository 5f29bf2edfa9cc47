// `ftune tokenize`: JSONL text (and text pairs) to token ids with a Hugging Face tokenizer.
//
//   ftune tokenize --tokenizer DIR|tokenizer.json --input in.jsonl --output out.jsonl [--max-length
//   N]
//
// Each input line is {"text": ..., "text_pair": ...?}; each output line is
// {"input_ids": [...], "token_type_ids": [...]}, equal to transformers' tokenizer(text, text_pair)
// (with --max-length N: tokenizer(text, text_pair, max_length=N), i.e. longest_first truncation).
// Lines are tokenized in parallel, in order. A bad line (not JSON, not an object, no string
// "text", invalid UTF-8) stops the run with an error naming FILE:LINE; the output is written
// through a temporary file and renamed at the end, so an error leaves no partial output.
// --invalid-utf8 replace repairs invalid UTF-8 bytes to U+FFFD instead of rejecting the line.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/arguments.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/atomic_file.h"
#include "io/path_guard.h"
#include "io/signal_cleanup.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace ftune::cli {

namespace {

struct TokenizeArgs {
  std::string tokenizer, input, output;
  int64_t max_length = 0;
  int threads = 0;
  std::string invalid_utf8 = "error";
  bool no_special_tokens = false;
};

struct Line {
  size_t number;
  text::TextPair input;
};

// Parses one JSONL line into a text pair; InputError names FILE:LINE.
text::TextPair parse_line(std::string& raw, size_t number, const TokenizeArgs& a) {
  const std::string where = fmt::format("{}:{}", a.input, number);
  const size_t bad = text::utf8_find_invalid(raw);
  if (bad != std::string::npos) {
    if (a.invalid_utf8 != "replace")
      throw InputError(
          fmt::format("{}: invalid UTF-8 at byte {} of the line (use --invalid-utf8 replace to "
                      "substitute U+FFFD)",
                      where, bad + 1));
    raw = text::utf8_sanitize(raw);
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(raw);
  } catch (const nlohmann::json::exception& e) {  // syntax errors, numbers out of range
    throw InputError(fmt::format("{}: invalid JSON: {}", where, e.what()));
  }
  if (!j.is_object())
    throw InputError(where + ": expected a JSON object {\"text\": ..., \"text_pair\": ...}");
  auto t = j.find("text");
  if (t == j.end()) throw InputError(where + ": missing key \"text\"");
  if (!t->is_string()) throw InputError(where + ": key \"text\" must be a string");
  text::TextPair p{t->get<std::string>(), std::nullopt};
  auto pair = j.find("text_pair");
  if (pair != j.end() && !pair->is_null()) {
    if (!pair->is_string())
      throw InputError(where + ": key \"text_pair\" must be a string or null");
    p.pair = pair->get<std::string>();
  }
  return p;
}

void append_ids(std::string& out, const char* key, const std::vector<uint32_t>& ids) {
  out += '"';
  out += key;
  out += "\": [";
  char buf[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ", ";
    const auto r = std::to_chars(buf, buf + sizeof(buf), ids[i]);
    out.append(buf, r.ptr);
  }
  out += ']';
}

void run_tokenize(const TokenizeArgs& a) {
  io::refuse_output_over_inputs({"--output", a.output},
                                {{"--input", a.input}, {"--tokenizer", a.tokenizer}}, false);
  io::remove_temporaries_on_signals();
  const text::Tokenizer tok = text::Tokenizer::from_path(a.tokenizer);
  text::EncodeOptions options = tok.default_options();
  options.add_special_tokens = !a.no_special_tokens;
  if (a.max_length > 0) {
    options.truncation = text::Truncation::kLongestFirst;
    options.max_length = a.max_length;
  }
  std::unique_ptr<ThreadPool> own_pool;
  if (a.threads > 0) own_pool = std::make_unique<ThreadPool>(a.threads);
  ThreadPool& pool = own_pool ? *own_pool : compute_pool();

  std::ifstream in(a.input, std::ios::binary);
  if (!in) throw InputError(a.input + ": cannot open input file");
  io::AtomicFileWriter out(a.output);

  constexpr size_t kChunk = 8192;  // lines per parallel batch
  std::vector<text::TextPair> batch;
  std::string raw, buffer;
  size_t number = 0, written = 0;
  auto flush = [&] {
    if (batch.empty()) return;
    const auto encodings = tok.encode_batch(batch, options, &pool);
    buffer.clear();
    for (const auto& e : encodings) {
      buffer += '{';
      append_ids(buffer, "input_ids", e.ids);
      buffer += ", ";
      append_ids(buffer, "token_type_ids", e.type_ids);
      buffer += "}\n";
    }
    out.write(buffer);
    written += batch.size();
    batch.clear();
  };
  while (std::getline(in, raw)) {
    ++number;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    if (raw.find_first_not_of(" \t") == std::string::npos) {
      // Only the trailing blank lines of a file are tolerated: any other would shift the output.
      std::string rest;
      size_t blank_at = number;
      while (std::getline(in, rest)) {
        ++number;
        if (rest.find_first_not_of(" \t\r") != std::string::npos)
          throw InputError(
              fmt::format("{}:{}: empty line, expected a JSON object", a.input, blank_at));
      }
      break;
    }
    batch.push_back(parse_line(raw, number, a));
    if (batch.size() == kChunk) flush();
  }
  if (in.bad()) throw InputError(a.input + ": read error");
  flush();
  out.commit();
  spdlog::info("tokenized {} lines from {} into {}", written, a.input, a.output);
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd =
      app.add_subcommand("tokenize", "Tokenize JSONL texts with a Hugging Face tokenizer.json");
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json or a model directory holding one")
      ->required();
  cmd->add_option("--input", args->input,
                  "JSONL input: {\"text\": ..., \"text_pair\": ...?} per line")
      ->required();
  cmd->add_option("--output", args->output,
                  "JSONL output: {\"input_ids\": [...], \"token_type_ids\": [...]}")
      ->required();
  cmd->add_option("--max-length", args->max_length,
                  "truncate to N tokens (longest_first), as max_length=N")
      ->check(positive_integer());
  cmd->add_option("--threads", args->threads, "worker threads (default: all)")
      ->check(non_negative_integer());
  cmd->add_option("--invalid-utf8", args->invalid_utf8,
                  "what to do with invalid UTF-8: error or replace (U+FFFD)")
      ->check(CLI::IsMember({"error", "replace"}));
  cmd->add_flag("--no-special-tokens", args->no_special_tokens,
                "do not add [CLS]/[SEP]-style special tokens");
  cmd->callback([args] { run_tokenize(*args); });
}

}  // namespace ftune::cli
