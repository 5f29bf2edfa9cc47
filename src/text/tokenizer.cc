// Tokenizer: loading, the encode pipeline (added tokens -> normalizer -> pre-tokenizer -> model
// -> truncation -> post-processor -> padding), the parallel batch API and decoding.
#include "text/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/thread_pool.h"
#include "text/tokenizer_config.h"
#include "text/tokenizer_impl.h"
#include "text/truncation.h"
#include "text/utf8.h"

namespace ftune::text {

namespace {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InputError(path + ": read error");
  return ss.str();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Loading

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json,
                               const std::string& name) {
  auto impl = std::make_unique<Impl>();
  load_tokenizer_json(*impl, tokenizer_json, name);
  if (!config_json.empty()) {
    const std::string config_name =
        (std::filesystem::path(name).parent_path() / "tokenizer_config.json").string();
    apply_tokenizer_config(*impl, config_json, config_name);
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::string& tokenizer_json) {
  return from_json(read_text_file(tokenizer_json), {}, tokenizer_json);
}

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  const std::filesystem::path d(dir);
  const std::string tok = (d / "tokenizer.json").string();
  if (!std::filesystem::is_directory(d))
    throw InputError(std::filesystem::exists(d) ? dir + ": not a directory"
                                                : dir + ": no such directory");
  if (!std::filesystem::exists(tok))
    throw InputError(dir + ": no tokenizer.json in this directory");
  const std::string cfg = (d / "tokenizer_config.json").string();
  const std::string config = std::filesystem::exists(cfg) ? read_text_file(cfg) : std::string();
  return from_json(read_text_file(tok), config, tok);
}

Tokenizer Tokenizer::from_path(const std::string& path) {
  if (std::filesystem::is_directory(path)) return from_dir(path);
  if (!std::filesystem::exists(path)) throw InputError(path + ": no such file or directory");
  return from_file(path);
}

// ---------------------------------------------------------------------------------------------
// Encoding

uint32_t Tokenizer::Impl::token_to_id(std::string_view token) const {
  const uint32_t id = added.token_to_id(token);
  return id != StringIdMap::kMissing ? id : model->token_to_id(token);
}

void Tokenizer::Impl::encode_sequence(std::string_view text, std::vector<uint32_t>& ids) const {
  thread_local PreTokenized pt;
  thread_local std::string repaired;
  if (utf8_find_invalid(text) != std::string_view::npos) {
    repaired = utf8_sanitize(text);
    text = repaired;
  }
  added.extract_and_normalize(text, normalizer.get(), pt);
  if (pre_tokenizer) pre_tokenizer->pre_tokenize(pt);
  ids.clear();
  for (const Span& s : pt.spans) {
    if (s.id >= 0)
      ids.push_back(static_cast<uint32_t>(s.id));
    else
      model->tokenize(pt.view(s), ids);
  }
}

Encoding Tokenizer::Impl::encode(std::string_view text, std::optional<std::string_view> pair,
                                 const EncodeOptions& options) const {
  thread_local std::vector<uint32_t> first, second;
  encode_sequence(text, first);
  if (pair) encode_sequence(*pair, second);

  auto resolve_max_length = [&](const char* what) -> size_t {
    if (options.max_length > 0) return static_cast<size_t>(options.max_length);
    if (options.max_length < 0)
      throw InputError(std::string(what) + ": max_length must not be negative");
    if (!model_max_length)
      throw InputError(std::string(what) +
                       " needs max_length: the tokenizer has no model_max_length");
    return static_cast<size_t>(*model_max_length);
  };

  if (options.truncation != Truncation::kNone) {
    size_t max_length = resolve_max_length("truncation");
    const size_t added_tokens = post_processor ? post_processor->added_tokens(pair.has_value()) : 0;
    bool truncate = true;
    if (options.add_special_tokens && added_tokens > 0) {
      // HF computes max_length - added_tokens in unsigned arithmetic: when max_length is smaller
      // than the special tokens the limit wraps around and nothing is truncated. Same here.
      if (max_length < added_tokens)
        truncate = false;
      else
        max_length -= added_tokens;
    }
    if (truncate)
      truncate_sequences(first, pair ? &second : nullptr, max_length, options.truncation,
                         options.truncation_side);
  }

  Encoding out;
  post_process(post_processor.get(), first, pair ? &second : nullptr, options.add_special_tokens,
               out);

  if (options.padding != Padding::kNone) {
    size_t length = options.padding == Padding::kMaxLength
                        ? resolve_max_length("padding to max_length")
                        : out.size();
    if (options.pad_to_multiple_of > 0) {
      const auto m = static_cast<size_t>(options.pad_to_multiple_of);
      if (length % m) length += m - length % m;
    }
    const std::optional<uint32_t> pid = options.pad_id ? options.pad_id : pad_id;
    if (out.size() < length && !pid)
      throw InputError("padding requested but the tokenizer has no pad token");
    if (pid) pad_encoding(out, length, *pid, options.pad_type_id, options.padding_side);
  }
  return out;
}

Encoding Tokenizer::encode(std::string_view text, std::optional<std::string_view> pair) const {
  return impl_->encode(text, pair, impl_->defaults);
}

Encoding Tokenizer::encode(std::string_view text, std::optional<std::string_view> pair,
                           const EncodeOptions& options) const {
  return impl_->encode(text, pair, options);
}

std::vector<Encoding> Tokenizer::encode_batch(const std::vector<TextPair>& inputs,
                                              const EncodeOptions& options,
                                              ThreadPool* pool) const {
  std::vector<Encoding> out(inputs.size());
  ThreadPool& p = pool ? *pool : compute_pool();
  // Tasks of a few dozen inputs: enough to balance uneven lengths, few enough to keep the
  // hand-out cheap.
  const int64_t n = static_cast<int64_t>(inputs.size());
  const int64_t block = std::clamp<int64_t>(n / (8 * p.num_threads()), 1, 64);
  const int64_t tasks = (n + block - 1) / block;
  p.parallel_tasks(tasks, [&](int64_t t) {
    const int64_t b = t * block, e = std::min(n, b + block);
    for (int64_t i = b; i < e; ++i) {
      const TextPair& in = inputs[static_cast<size_t>(i)];
      std::optional<std::string_view> pair;
      if (in.pair) pair = *in.pair;
      out[static_cast<size_t>(i)] = impl_->encode(in.text, pair, options);
    }
  });
  if (options.padding == Padding::kLongest && !out.empty()) {
    size_t longest = 0;
    for (const Encoding& e : out) longest = std::max(longest, e.size());
    const std::optional<uint32_t> pid = options.pad_id ? options.pad_id : impl_->pad_id;
    for (Encoding& e : out) {
      if (e.size() < longest && !pid)
        throw InputError("padding requested but the tokenizer has no pad token");
      if (pid) pad_encoding(e, longest, *pid, options.pad_type_id, options.padding_side);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Decoding and vocabulary

std::string Tokenizer::decode(const std::vector<uint32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (uint32_t id : ids) {
    const std::string* t = impl_->added.id_to_token(id);
    if (!t) t = impl_->model->id_to_token(id);
    if (!t) continue;  // unknown ids are dropped, as HF does
    if (skip_special_tokens && impl_->added.is_special_content(*t)) continue;
    tokens.push_back(*t);
  }
  if (!impl_->decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  impl_->decoder->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

EncodeOptions Tokenizer::default_options() const {
  return impl_->defaults;
}
EncodeOptions Tokenizer::tokenizers_options() const {
  return impl_->json_options;
}

std::optional<uint32_t> Tokenizer::token_to_id(std::string_view token) const {
  const uint32_t id = impl_->token_to_id(token);
  return id == StringIdMap::kMissing ? std::nullopt : std::optional<uint32_t>(id);
}

std::optional<std::string> Tokenizer::id_to_token(uint32_t id) const {
  if (const AddedToken* t = impl_->added.token(id)) return t->content;
  if (const std::string* t = impl_->model->id_to_token(id)) return *t;
  return std::nullopt;
}

size_t Tokenizer::vocab_size() const {
  return impl_->model->vocab_size() + impl_->added.count_not_in(*impl_->model);
}

std::optional<uint32_t> Tokenizer::pad_id() const {
  return impl_->pad_id;
}
std::optional<int64_t> Tokenizer::model_max_length() const {
  return impl_->model_max_length;
}
size_t Tokenizer::num_special_tokens(bool pair) const {
  return impl_->post_processor ? impl_->post_processor->added_tokens(pair) : 0;
}

}  // namespace ftune::text
