// BPE (GPT-2, RoBERTa, Llama, Gemma): split the word into characters (or their bytes, with
// byte_fallback, or the unknown token), then repeatedly merge the adjacent pair with the lowest
// merge rank (leftmost first on ties) until no pair of the merge list remains. This follows HF's
// Word::merge_all step for step, including how it validates queued merges, so that vocabularies
// with several merges producing the same token give the same ids. Words are cached per thread.
// `dropout` is ignored: ftune always tokenizes deterministically.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/model.h"
#include "text/u64_map.h"
#include "text/utf8.h"

namespace ftune::text {

namespace {

std::atomic<uint64_t> g_next_model_id{1};

// A per-thread word -> ids cache for one BPE model.
struct WordCache {
  uint64_t model_id = 0;
  StringIdMap index;                                   // word -> entry
  std::vector<std::pair<uint32_t, uint32_t>> entries;  // (offset in ids, count)
  std::vector<uint32_t> ids;
};

constexpr size_t kCacheCapacity = 1 << 16;   // words per thread and model, then the cache restarts
constexpr size_t kMaxCachedWordBytes = 256;  // as HF

class Bpe final : public Model {
 public:
  explicit Bpe(const JsonNode& node) : model_id_(g_next_model_id++) {
    read_vocab_object(node.at("vocab"));
    if (auto u = node.get("unk_token")) unk_token_ = u->as_string(), has_unk_ = true;
    if (auto p = node.get("continuing_subword_prefix")) prefix_ = p->as_string();
    if (auto s = node.get("end_of_word_suffix")) suffix_ = s->as_string();
    fuse_unk_ = node.bool_or("fuse_unk", false);
    byte_fallback_ = node.bool_or("byte_fallback", false);
    ignore_merges_ = node.bool_or("ignore_merges", false);
    read_merges(node.at("merges"));
    if (byte_fallback_) {
      for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", b);
        byte_ids_[b] = vocab_.find(name);
      }
    }
  }

  void tokenize(std::string_view word, std::vector<uint32_t>& ids) const override {
    if (ignore_merges_) {
      const uint32_t id = vocab_.find(word);
      if (id != StringIdMap::kMissing) {
        ids.push_back(id);
        return;
      }
    }
    if (word.size() >= kMaxCachedWordBytes) {
      merge_word(word, ids);
      return;
    }
    WordCache& cache = thread_cache();
    const uint32_t hit = cache.index.find(word);
    if (hit != StringIdMap::kMissing) {
      const auto [offset, count] = cache.entries[hit];
      ids.insert(ids.end(), cache.ids.begin() + offset, cache.ids.begin() + offset + count);
      return;
    }
    const size_t first = ids.size();
    merge_word(word, ids);
    if (cache.entries.size() >= kCacheCapacity) {
      cache.index.clear();
      cache.entries.clear();
      cache.ids.clear();
    }
    cache.index.set(word, static_cast<uint32_t>(cache.entries.size()));
    cache.entries.emplace_back(static_cast<uint32_t>(cache.ids.size()),
                               static_cast<uint32_t>(ids.size() - first));
    cache.ids.insert(cache.ids.end(), ids.begin() + first, ids.end());
  }

 private:
  struct Symbol {
    uint32_t c;
    int32_t prev, next;
    uint32_t len;  // bytes; 0 marks a symbol merged into its left neighbour
  };
  struct Merge {
    uint32_t rank, pos, new_id;
  };
  // Heap order: the smallest (rank, pos) on top.
  static bool later(const Merge& a, const Merge& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }

  void read_merges(const JsonNode& merges) {
    const size_t n = merges.size();
    for (size_t i = 0; i < n; ++i) {
      const JsonNode m = merges[i];
      std::string a, b;
      if (m.is_array()) {
        if (m.size() != 2) m.fail("a pair [left, right]");
        a = m[0].as_string();
        b = m[1].as_string();
      } else if (m.is_string()) {
        const std::string line = m.as_string();
        const size_t sp = line.find(' ');
        if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
          m.fail_msg("merge \"" + line + "\" must be two tokens separated by one space");
        a = line.substr(0, sp);
        b = line.substr(sp + 1);
      } else {
        m.fail("a pair [left, right] or a string \"left right\"");
      }
      const uint32_t a_id = vocab_.find(a), b_id = vocab_.find(b);
      if (a_id == StringIdMap::kMissing)
        m.fail_msg("merge token \"" + a + "\" is not in the vocabulary");
      if (b_id == StringIdMap::kMissing)
        m.fail_msg("merge token \"" + b + "\" is not in the vocabulary");
      // HF drops len(continuing_subword_prefix) bytes from the right token, whatever they are.
      if (b.size() < prefix_.size() ||
          (prefix_.size() < b.size() &&
           (static_cast<unsigned char>(b[prefix_.size()]) & 0xC0) == 0x80))
        m.fail_msg("merge token \"" + b + "\" does not start with the continuing subword prefix");
      const std::string merged = a + b.substr(prefix_.size());
      const uint32_t new_id = vocab_.find(merged);
      if (new_id == StringIdMap::kMissing)
        m.fail_msg("merged token \"" + merged + "\" is not in the vocabulary");
      merges_.set((uint64_t(a_id) << 32) | b_id,
                  (uint64_t(i) << 32) | new_id);  // later duplicates win
    }
  }

  uint32_t unk_id() const {
    const uint32_t id = vocab_.find(unk_token_);
    if (id == StringIdMap::kMissing)
      throw InputError("BPE: the unknown token \"" + unk_token_ + "\" is not in the vocabulary");
    return id;
  }

  WordCache& thread_cache() const {
    thread_local std::vector<std::unique_ptr<WordCache>> caches;  // most recently used last
    for (size_t i = caches.size(); i-- > 0;) {
      if (caches[i]->model_id == model_id_) return *caches[i];
    }
    if (caches.size() >= 4) caches.erase(caches.begin());  // caches of models no longer in use
    caches.push_back(std::make_unique<WordCache>());
    caches.back()->model_id = model_id_;
    return *caches.back();
  }

  // BPE::merge_word then Word::merge_all.
  void merge_word(std::string_view w, std::vector<uint32_t>& ids) const {
    thread_local std::vector<Symbol> symbols;
    thread_local std::vector<Merge> queue;
    thread_local std::string piece;
    symbols.clear();
    auto add = [&](uint32_t c, uint32_t len) {
      const auto n = static_cast<int32_t>(symbols.size());
      if (n > 0) symbols.back().next = n;
      symbols.push_back(Symbol{c, n - 1, -1, len});
    };
    bool pending_unk = false;
    uint32_t unk_len = 0, pending_unk_id = 0;
    for (size_t i = 0; i < w.size();) {
      const size_t at = i;
      i += utf8_len(static_cast<unsigned char>(w[i]));
      const uint32_t byte_len = static_cast<uint32_t>(i - at);
      std::string_view s = w.substr(at, byte_len);
      if ((at > 0 && !prefix_.empty()) || (i == w.size() && !suffix_.empty())) {
        piece.clear();
        if (at > 0) piece.append(prefix_);
        piece.append(s);
        if (i == w.size()) piece.append(suffix_);
        s = piece;
      }
      const uint32_t id = vocab_.find(s);
      if (id != StringIdMap::kMissing) {
        if (pending_unk) {
          add(pending_unk_id, unk_len);
          pending_unk = false;
        }
        add(id, byte_len);
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (unsigned char b : s) all = all && byte_ids_[b] != StringIdMap::kMissing;
        if (all) {
          for (unsigned char b : s) add(byte_ids_[b], 1);
          continue;  // HF keeps a pending unknown token pending here
        }
      }
      if (has_unk_) {
        if (pending_unk && fuse_unk_) {
          unk_len += byte_len;
        } else {
          if (pending_unk) add(pending_unk_id, unk_len);
          pending_unk = true;
          pending_unk_id = unk_id();
          unk_len = byte_len;
        }
      }
    }
    if (pending_unk) add(pending_unk_id, unk_len);

    queue.clear();
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const uint64_t m = merges_.find((uint64_t(symbols[i].c) << 32) | symbols[i + 1].c);
      if (m != U64Map::kMissing)
        queue.push_back(Merge{uint32_t(m >> 32), uint32_t(i), uint32_t(m)});
    }
    std::make_heap(queue.begin(), queue.end(), later);
    while (!queue.empty()) {
      std::pop_heap(queue.begin(), queue.end(), later);
      const Merge top = queue.back();
      queue.pop_back();
      Symbol& cur = symbols[top.pos];
      if (cur.len == 0 || cur.next == -1) continue;
      const size_t next_pos = static_cast<size_t>(cur.next);
      const Symbol right = symbols[next_pos];
      // Skip queue entries made stale by earlier merges (HF compares the resulting token).
      const uint64_t m = merges_.find((uint64_t(cur.c) << 32) | right.c);
      if (m == U64Map::kMissing || uint32_t(m) != top.new_id) continue;
      cur.c = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      symbols[next_pos].len = 0;
      if (right.next > -1 && static_cast<size_t>(right.next) < symbols.size())
        symbols[static_cast<size_t>(right.next)].prev = static_cast<int32_t>(top.pos);
      if (cur.prev >= 0) {
        const Symbol& prev = symbols[static_cast<size_t>(cur.prev)];
        const uint64_t pm = merges_.find((uint64_t(prev.c) << 32) | cur.c);
        if (pm != U64Map::kMissing) {
          queue.push_back(Merge{uint32_t(pm >> 32), static_cast<uint32_t>(cur.prev), uint32_t(pm)});
          std::push_heap(queue.begin(), queue.end(), later);
        }
      }
      if (cur.next > -1 && static_cast<size_t>(cur.next) < symbols.size()) {
        const Symbol& nxt = symbols[static_cast<size_t>(cur.next)];
        const uint64_t nm = merges_.find((uint64_t(cur.c) << 32) | nxt.c);
        if (nm != U64Map::kMissing) {
          queue.push_back(Merge{uint32_t(nm >> 32), top.pos, uint32_t(nm)});
          std::push_heap(queue.begin(), queue.end(), later);
        }
      }
    }
    for (const Symbol& s : symbols)
      if (s.len != 0) ids.push_back(s.c);
  }

  uint64_t model_id_;
  std::string unk_token_, prefix_, suffix_;
  bool has_unk_ = false, fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  U64Map merges_;  // (left id << 32 | right id) -> (rank << 32 | merged id)
  uint32_t byte_ids_[256] = {};
};

}  // namespace

std::unique_ptr<Model> make_bpe_model(const JsonNode& node) {
  return std::make_unique<Bpe>(node);
}

}  // namespace ftune::text
