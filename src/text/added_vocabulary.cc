// Added tokens: id assignment, matching and extraction (see added_vocabulary.h).
#include "text/added_vocabulary.h"

#include <algorithm>

#include "core/error.h"
#include "text/unicode_props.h"
#include "text/utf8.h"

namespace ftune::text {

AddedToken parse_added_token(const JsonNode& node) {
  AddedToken t;
  t.content = node.at("content").as_string();
  t.single_word = node.bool_or("single_word", false);
  t.lstrip = node.bool_or("lstrip", false);
  t.rstrip = node.bool_or("rstrip", false);
  t.special = node.bool_or("special", false);
  t.normalized = node.bool_or("normalized", !t.special);
  return t;
}

void AddedVocabulary::Trie::clear() {
  leaf.assign(1, -1);
  edges = U64Map();
  std::fill(std::begin(first_byte), std::end(first_byte), false);
}

void AddedVocabulary::Trie::insert(std::string_view pattern, uint32_t id) {
  if (leaf.empty()) leaf.assign(1, -1);
  if (pattern.empty()) return;
  first_byte[static_cast<unsigned char>(pattern[0])] = true;
  uint64_t node = 0;
  for (unsigned char c : pattern) {
    const uint64_t key = (node << 8) | c;
    const uint64_t child = edges.find(key);
    if (child != U64Map::kMissing) {
      node = child;
    } else {
      leaf.push_back(-1);
      node = leaf.size() - 1;
      edges.set(key, node);
    }
  }
  leaf[node] = id;  // a later token with the same pattern wins
}

bool AddedVocabulary::Trie::find(std::string_view s, size_t from, size_t& start, size_t& end,
                                 uint32_t& id) const {
  for (size_t st = from; st < s.size(); ++st) {
    if (!first_byte[static_cast<unsigned char>(s[st])]) continue;
    uint64_t node = 0;
    int64_t best_id = -1;
    size_t best_end = 0;
    for (size_t k = st; k < s.size(); ++k) {
      const uint64_t child = edges.find((node << 8) | static_cast<unsigned char>(s[k]));
      if (child == U64Map::kMissing) break;
      node = child;
      if (leaf[node] >= 0) {
        best_id = leaf[node];
        best_end = k + 1;
      }
    }
    if (best_id >= 0) {
      start = st;
      end = best_end;
      id = static_cast<uint32_t>(best_id);
      return true;
    }
  }
  return false;
}

const AddedVocabulary::Entry* AddedVocabulary::entry(uint32_t id) const {
  const uint64_t i = by_id_.find(id);
  return i == U64Map::kMissing ? nullptr : &entries_[i];
}

const AddedToken* AddedVocabulary::token(uint32_t id) const {
  const Entry* e = entry(id);
  return e ? &e->token : nullptr;
}

size_t AddedVocabulary::count_not_in(const Model& model) const {
  size_t n = 0;
  map_.for_each([&](std::string_view content, uint32_t) {
    n += model.token_to_id(content) == StringIdMap::kMissing;
  });
  return n;
}

const std::string* AddedVocabulary::id_to_token(uint32_t id) const {
  const Entry* e = entry(id);
  if (!e) return nullptr;
  return e->has_normalized ? &e->normalized : &e->token.content;
}

void AddedVocabulary::add_tokens(const std::vector<AddedToken>& tokens, const Model& model,
                                 const Normalizer* normalizer) {
  const auto model_size = static_cast<uint32_t>(model.vocab_size());
  uint32_t next_id = model_size;
  if (!entries_.empty()) {
    uint32_t max_id = 0;
    for (const Entry& e : entries_) max_id = std::max(max_id, e.id);
    next_id = (max_id >= model_size || model_size == 0) ? max_id + 1 : model_size;
  }
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    const uint32_t existing = map_.find(t.content);
    if (existing != StringIdMap::kMissing) {
      const Entry* e = entry(existing);
      if (e && e->token == t) continue;
    }
    uint32_t id = existing != StringIdMap::kMissing ? existing : model.token_to_id(t.content);
    if (id == StringIdMap::kMissing) id = next_id++;

    Entry e{id, t, {}, false};
    if (t.normalized && normalizer) {
      uint32_t prefix = static_cast<uint32_t>(utf8_len(static_cast<unsigned char>(t.content[0])));
      normalizer->normalize(t.content, prefix, e.normalized);
      e.has_normalized = e.normalized != t.content;
      if (!e.has_normalized) e.normalized.clear();
    }
    map_.set(t.content, id);
    if (t.special) special_.insert(t.content);
    const uint64_t at = by_id_.find(id);
    if (at != U64Map::kMissing) {
      entries_[at] = std::move(e);
    } else {
      by_id_.set(id, entries_.size());
      entries_.push_back(std::move(e));
    }
  }
  rebuild_tries();
}

void AddedVocabulary::rebuild_tries() {
  raw_trie_.clear();
  normalized_trie_.clear();
  has_raw_ = has_normalized_ = false;
  for (const Entry& e : entries_) {
    if (e.token.normalized) {
      normalized_trie_.insert(
          e.has_normalized ? std::string_view(e.normalized) : std::string_view(e.token.content),
          e.id);
      has_normalized_ = true;
    } else {
      raw_trie_.insert(e.token.content, e.id);
      has_raw_ = true;
    }
  }
}

namespace {

// Rust regex \w$ on s[..at] and ^\w on s[at..].
bool ends_with_word(std::string_view s, size_t at) {
  if (at == 0) return false;
  size_t i = at;
  return unicode::is_word(utf8_prev(s, i));
}
bool starts_with_word(std::string_view s, size_t at) {
  if (at >= s.size()) return false;
  size_t i = at;
  return unicode::is_word(utf8_next(s, i));
}

}  // namespace

void AddedVocabulary::split_piece(std::string_view piece, const Span& parent, const Trie& trie,
                                  bool has_patterns, SpanWriter& out) const {
  if (piece.empty()) return;
  size_t start_offset = 0, pos = 0;
  size_t s = 0, e = 0;
  uint32_t id = 0;
  while (has_patterns && trie.find(piece, pos, s, e, id)) {
    pos = e;  // the automaton resumes after the match, whatever happens to it below
    const Entry* ent = entry(id);
    const AddedToken& tok = ent->token;
    if (encode_special_tokens_ && tok.special) continue;
    if (tok.single_word) {
      const bool start_space = s == 0 || !ends_with_word(piece, s);
      const bool stop_space = e == piece.size() || !starts_with_word(piece, e);
      if (!start_space || !stop_space) continue;
    }
    size_t start = s, stop = e;
    if (tok.lstrip) {
      size_t ws = start;  // start of the whitespace run that ends at `start`
      while (ws > 0) {
        size_t j = ws;
        if (!unicode::is_whitespace(utf8_prev(piece, j))) break;
        ws = j;
      }
      start = std::max(ws, start_offset);
    }
    if (tok.rstrip) {
      while (stop < piece.size()) {
        size_t j = stop;
        if (!unicode::is_whitespace(utf8_next(piece, j))) break;
        stop = j;
      }
    }
    if (start_offset < start) out.emit_slice(piece, parent, start_offset, start);
    out.emit_token(static_cast<int32_t>(id));
    start_offset = stop;
  }
  if (start_offset < piece.size()) out.emit_slice(piece, parent, start_offset, piece.size());
}

void AddedVocabulary::extract_and_normalize(std::string_view text, const Normalizer* normalizer,
                                            PreTokenized& pt) const {
  pt.reset(text);
  // 1. Tokens with normalized=false, in the raw text.
  pt.rewrite([&](std::string_view piece, const Span& span, SpanWriter& out) {
    split_piece(piece, span, raw_trie_, has_raw_, out);
  });
  // 2. Normalize each remaining piece, then find the tokens with normalized=true in it.
  thread_local std::string normalized;
  pt.rewrite([&](std::string_view piece, const Span& span, SpanWriter& out) {
    Span parent = span;
    std::string_view s = piece;
    if (normalizer) {
      normalized.clear();
      normalizer->normalize(piece, parent.origin_prefix, normalized);
      s = normalized;
    }
    split_piece(s, parent, normalized_trie_, has_normalized_, out);
  });
}

}  // namespace ftune::text
