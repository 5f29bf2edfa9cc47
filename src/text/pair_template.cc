// Pair templates (see pair_template.h).
#include "text/pair_template.h"

#include <fmt/format.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "io/json_file.h"
#include "text/truncation.h"

namespace ftune::text {

PairTemplate PairTemplate::parse(const std::string& spec, const std::string& where) {
  PairTemplate t;
  t.spec_ = spec;
  std::string literal;
  bool text = false, pair = false;
  auto flush = [&] {
    if (!literal.empty()) t.pieces_.push_back({Kind::Literal, literal});
    literal.clear();
  };
  for (size_t i = 0; i < spec.size(); ++i) {
    const char ch = spec[i];
    if ((ch == '{' || ch == '}') && i + 1 < spec.size() && spec[i + 1] == ch) {
      literal += ch;
      ++i;
      continue;
    }
    if (ch == '}')
      throw InputError(fmt::format("{}: unmatched '}}' at offset {} (write '}}}}' for a brace)",
                                   where, i));
    if (ch != '{') {
      literal += ch;
      continue;
    }
    const size_t end = spec.find('}', i);
    if (end == std::string::npos)
      throw InputError(fmt::format("{}: unmatched '{{' at offset {} (write '{{{{' for a brace)",
                                   where, i));
    const std::string name = spec.substr(i + 1, end - i - 1);
    bool& seen = name == "text" ? text : pair;
    if (name != "text" && name != "text_pair")
      throw InputError(fmt::format(
          "{}: unknown placeholder '{{{}}}'; expected {{text}} and {{text_pair}}", where, name));
    if (seen) throw InputError(fmt::format("{}: '{{{}}}' appears twice", where, name));
    seen = true;
    flush();
    t.pieces_.push_back({name == "text" ? Kind::Text : Kind::Pair, {}});
    i = end;
  }
  flush();
  if (!text) throw InputError(fmt::format("{}: the template has no {{text}}", where));
  return t;
}

std::vector<Encoding> PairTemplate::encode_batch(const Tokenizer& tokenizer,
                                                 const std::vector<TextPair>& inputs,
                                                 int64_t max_length) const {
  EncodeOptions plain = tokenizer.default_options();
  plain.add_special_tokens = false;
  const bool has_pair =
      std::any_of(pieces_.begin(), pieces_.end(), [](const Piece& p) { return p.kind == Kind::Pair; });
  // The joined strings, tokenized in one parallel batch: transformers' ids.
  std::vector<TextPair> joined;
  for (const TextPair& in : inputs) {
    std::string j;
    for (const Piece& p : pieces_)
      j += p.kind == Kind::Literal ? p.literal : p.kind == Kind::Text ? in.text : in.pair.value_or("");
    joined.push_back({std::move(j), std::nullopt});
  }
  std::vector<Encoding> out = tokenizer.encode_batch(joined, plain);
  std::vector<size_t> over;
  for (size_t i = 0; i < out.size(); ++i)
    if (max_length > 0 && static_cast<int64_t>(out[i].size()) > max_length) over.push_back(i);
  if (!over.empty()) {
    // Rows too long: the pieces apart, the texts cut longest-first to what the literals leave.
    std::vector<TextPair> literals, texts, pairs;
    for (const Piece& p : pieces_)
      if (p.kind == Kind::Literal) literals.push_back({p.literal, std::nullopt});
    for (size_t i : over) {
      texts.push_back({inputs[i].text, std::nullopt});
      pairs.push_back({inputs[i].pair.value_or(""), std::nullopt});
    }
    const std::vector<Encoding> lit = tokenizer.encode_batch(literals, plain);
    const std::vector<Encoding> a = tokenizer.encode_batch(texts, plain);
    const std::vector<Encoding> b = tokenizer.encode_batch(pairs, plain);
    size_t fixed = 0;
    for (const Encoding& e : lit) fixed += e.size();
    if (fixed + (has_pair ? 2 : 1) > static_cast<size_t>(max_length))
      throw InputError(fmt::format(
          "pair template '{}': its own {} tokens leave no room for the texts within max_length {}",
          spec_, fixed, max_length));
    for (size_t k = 0; k < over.size(); ++k) {
      std::vector<uint32_t> first = a[k].ids, second = b[k].ids;
      truncate_sequences(first, has_pair ? &second : nullptr, max_length - fixed,
                         Truncation::kLongestFirst, plain.truncation_side);
      Encoding& e = out[over[k]];
      e = Encoding{};
      size_t l = 0;
      for (const Piece& p : pieces_) {
        const std::vector<uint32_t>& ids =
            p.kind == Kind::Literal ? lit[l++].ids : p.kind == Kind::Text ? first : second;
        e.ids.insert(e.ids.end(), ids.begin(), ids.end());
      }
    }
  }
  for (Encoding& e : out) {
    e.type_ids.assign(e.ids.size(), 0);
    e.attention_mask.assign(e.ids.size(), 1);
    e.special_tokens_mask.assign(e.ids.size(), 0);
  }
  return out;
}

void save_pair_template(const std::string& dir, const PairTemplate& t) {
  io::write_json_atomic((std::filesystem::path(dir) / kFtuneMetadataFile).string(),
                        {{"pair_template", t.spec()}});
}

std::optional<PairTemplate> saved_pair_template(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kFtuneMetadataFile).string();
  if (!std::filesystem::exists(path)) return std::nullopt;
  const nlohmann::json j = io::read_json_file(path);
  if (!j.is_object())
    throw InputError(fmt::format("{}: expected a JSON object, got {}", path, j.type_name()));
  const std::optional<std::string> spec = io::get_optional_string(j, "pair_template", path);
  if (!spec) return std::nullopt;
  return PairTemplate::parse(*spec, path + ": pair_template");
}

std::optional<PairTemplate> resolve_pair_template(const std::string& configured,
                                                  const std::string& key,
                                                  const std::string& model_dir) {
  if (!configured.empty()) return PairTemplate::parse(configured, key);
  std::optional<PairTemplate> saved = saved_pair_template(model_dir);
  if (saved)
    spdlog::info("text pairs formatted with the template {} saved in {}",
                 nlohmann::json(saved->spec()).dump(), model_dir);
  return saved;
}

}  // namespace ftune::text
