// Reading, tokenizing and batching prompt -> completion rows (see completions.h).
#include "data/completions.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "data/delimited.h"
#include "data/jsonl.h"
#include "data/memory_source.h"
#include "io/json_file.h"

namespace ftune::data {
namespace {

std::string text_field(const nlohmann::json& row, const std::string& key, bool may_be_empty,
                       const std::string& path, int64_t line) {
  const auto it = row.find(key);
  if (it == row.end() || it->is_null())
    throw InputError(fmt::format("{}:{}: key '{}' is missing (a causal-LM row needs a prompt and "
                                 "a completion)",
                                 path, line, key));
  if (!it->is_string())
    throw InputError(fmt::format("{}:{}: key '{}' must be a string, got {}", path, line, key,
                                 it->type_name()));
  std::string s = it->get<std::string>();
  if (!may_be_empty && s.empty())
    throw InputError(fmt::format("{}:{}: key '{}' is empty: there is nothing to learn", path,
                                 line, key));
  return s;
}

int64_t column_of(const std::vector<std::string>& header, const std::string& name,
                  const std::string& path) {
  const auto it = std::find(header.begin(), header.end(), name);
  if (it == header.end())
    throw InputError(fmt::format("{}: no column '{}' in the header ({})", path, name,
                                 fmt::join(header, ", ")));
  return it - header.begin();
}

// A row whose text begins with the special token the tokenizer puts first (BOS) gets it twice:
// text rendered by a chat template, tokenized with special tokens.
void refuse_doubled_special(const text::Tokenizer& tok, const text::Encoding& full,
                            const std::string& path, int64_t line) {
  if (full.ids.size() < 2 || full.ids[0] != full.ids[1] || full.special_tokens_mask.empty() ||
      full.special_tokens_mask[0] == 0 || full.special_tokens_mask[1] != 0)
    return;
  const std::string token = tok.id_to_token(static_cast<uint32_t>(full.ids[0])).value_or("?");
  throw InputError(fmt::format(
      "{}:{}: the row's text begins with '{}', which the tokenizer adds itself: it would appear "
      "twice (text rendered by a chat template carries its own; set data.add_special_tokens: "
      "false and data.append_eos: false for such rows, or `ftune eval --rendered-chat`)",
      path, line, token));
}

// A JSONL row of chat messages: the template that renders them is Jinja, which ftune's engine
// does not run.
void refuse_chat_row(const nlohmann::json& row, const CompletionFields& f, const std::string& path,
                     int64_t line) {
  const auto is_list = [&](const std::string& key) {
    const auto it = row.find(key);
    return it != row.end() && it->is_array();
  };
  const char* key = is_list("messages")       ? "messages"
                    : is_list(f.prompt)       ? f.prompt.c_str()
                    : is_list(f.completion)   ? f.completion.c_str()
                                              : nullptr;
  if (key == nullptr) return;
  throw InputError(fmt::format(
      "{}:{}: key '{}' holds chat messages; their text comes from the checkpoint's chat template "
      "(Jinja), which the ftune command does not run. Render them first with `python -m "
      "ftune.chat --model MODEL_DIR {} RENDERED.jsonl` (as transformers renders them) and train "
      "on that file with data.add_special_tokens: false and data.append_eos: false, or train "
      "from Python (ftune.train renders chat rows itself)",
      path, line, key, path));
}

}  // namespace

std::vector<CompletionExample> read_completions(const std::string& path, DataFormat format,
                                                bool has_header, const CompletionFields& f) {
  if (format == DataFormat::kAuto) format = data_format_for_path(path);
  std::vector<CompletionExample> out;
  if (format == DataFormat::kJsonl) {
    for_each_jsonl_object(path, [&](const nlohmann::json& row, int64_t line) {
      refuse_chat_row(row, f, path, line);
      out.push_back({text_field(row, f.prompt, true, path, line),
                     text_field(row, f.completion, false, path, line), line});
    });
    return out;
  }
  if (format != DataFormat::kTsv && format != DataFormat::kCsv)
    throw InputError(fmt::format("{}: prompt / completion rows are read from JSONL, TSV or CSV, "
                                 "not {}",
                                 path, data_format_name(format)));
  const std::vector<DelimitedRecord> records =
      parse_delimited(read_data_source(path), format == DataFormat::kTsv ? '\t' : ',');
  int64_t prompt_col = 0, completion_col = 1;
  size_t first = 0;
  if (has_header) {
    if (records.empty()) throw InputError(fmt::format("{}: empty file (no header row)", path));
    prompt_col = column_of(records[0].fields, f.prompt, path);
    completion_col = column_of(records[0].fields, f.completion, path);
    first = 1;
  }
  const std::string completion_name =
      has_header ? f.completion : fmt::format("column {}", completion_col);
  for (size_t i = first; i < records.size(); ++i) {
    const DelimitedRecord& r = records[i];
    if (!r.error.empty()) throw InputError(fmt::format("{}:{}: {}", path, r.line, r.error));
    const auto need = static_cast<size_t>(std::max(prompt_col, completion_col) + 1);
    if (r.fields.size() < need || r.fields[completion_col].empty())
      throw InputError(fmt::format("{}:{}: {} '{}' is missing or empty (a causal-LM row needs a "
                                   "prompt and a completion)",
                                   path, r.line, has_header ? "column" : "field",
                                   completion_name));
    out.push_back({r.fields[prompt_col], r.fields[completion_col], r.line});
  }
  return out;
}

TokenizedCompletion tokenize_completion(const text::Tokenizer& tok, const CompletionExample& e,
                                        int32_t eos_id, int64_t max_length,
                                        const std::string& path, const CompletionTokenizing& how) {
  text::EncodeOptions o = tok.default_options();
  o.truncation = text::Truncation::kNone;
  o.padding = text::Padding::kNone;
  o.add_special_tokens = how.special_tokens;
  const text::Encoding prompt = tok.encode(e.prompt, std::nullopt, o);
  const text::Encoding full = tok.encode(e.prompt + e.completion, std::nullopt, o);
  if (how.special_tokens) refuse_doubled_special(tok, full, path, e.line);
  TokenizedCompletion t;
  t.line = e.line;
  // TRL's common_prefix_length: the completion starts where the two tokenizations part (the
  // prompt's length unless tokens merge across the boundary).
  const auto parted = std::mismatch(prompt.ids.begin(), prompt.ids.end(), full.ids.begin(),
                                    full.ids.end());
  t.prompt_tokens = parted.first - prompt.ids.begin();
  t.input_ids.assign(full.ids.begin(), full.ids.end());
  if (how.append_eos) t.input_ids.push_back(eos_id);
  if (t.prompt_tokens >= static_cast<int64_t>(t.input_ids.size()))
    throw InputError(fmt::format("{}:{}: the completion adds no token to the prompt", path, e.line));
  if (max_length > 0 && static_cast<int64_t>(t.input_ids.size()) > max_length) {
    if (t.prompt_tokens >= max_length)
      throw InputError(fmt::format(
          "{}:{}: the prompt takes {} tokens, data.max_length is {}: no completion token is left "
          "to learn (raise data.max_length or shorten the prompt)",
          path, e.line, t.prompt_tokens, max_length));
    t.input_ids.resize(max_length);
  }
  const auto n = static_cast<int64_t>(t.input_ids.size());
  t.token_labels.assign(n, -100);
  for (int64_t i = 0; i + 1 < n; ++i)
    if (i + 1 >= t.prompt_tokens) t.token_labels[i] = t.input_ids[i + 1];
  return t;
}

Batch completion_batch(const std::vector<TokenizedCompletion>& rows, int32_t pad_id) {
  Batch b;
  b.size = static_cast<int64_t>(rows.size());
  for (const TokenizedCompletion& r : rows)
    b.seq_len = std::max<int64_t>(b.seq_len, static_cast<int64_t>(r.input_ids.size()));
  const int64_t N = b.size * b.seq_len;
  b.input_ids.assign(N, pad_id);
  b.attention_mask.assign(N, 0);
  b.token_labels.assign(N, -100);
  for (int64_t r = 0; r < b.size; ++r) {
    const TokenizedCompletion& x = rows[r];
    std::copy(x.input_ids.begin(), x.input_ids.end(), b.input_ids.begin() + r * b.seq_len);
    std::fill_n(b.attention_mask.begin() + r * b.seq_len, x.input_ids.size(), 1);
    std::copy(x.token_labels.begin(), x.token_labels.end(), b.token_labels.begin() + r * b.seq_len);
  }
  return b;
}

int32_t completion_eos_id(const std::string& model_dir, const std::string& key) {
  for (const char* file : {"config.json", "generation_config.json"}) {
    const std::string path = (std::filesystem::path(model_dir) / file).string();
    if (!std::filesystem::exists(path)) continue;
    const nlohmann::json j = io::read_json_file(path);
    const auto it = j.find("eos_token_id");
    if (it == j.end() || it->is_null()) continue;
    if (it->is_number_integer()) return it->get<int32_t>();
    if (it->is_array() && !it->empty() && (*it)[0].is_number_integer())
      return (*it)[0].get<int32_t>();
  }
  throw InputError(fmt::format(
      "{}: {} names no eos_token_id (config.json or generation_config.json); a causal LM learns "
      "to end each completion with it",
      key, model_dir));
}

}  // namespace ftune::data
