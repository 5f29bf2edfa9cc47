// Unigram (SentencePiece): the segmentation of the word that maximises the sum of token log
// probabilities (Viterbi over all vocabulary entries found by a prefix trie). A character no
// entry covers becomes the unknown token with score min_score - 10; consecutive unknown pieces
// are fused into one string, which is then looked up (or spelled in <0xXX> bytes with
// byte_fallback). Ties keep the path found first, as HF's encode_optimized does.
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/byte_trie.h"
#include "text/model.h"
#include "text/utf8.h"

namespace ftune::text {

namespace {

class Unigram final : public Model {
 public:
  explicit Unigram(const JsonNode& node) {
    const JsonNode vocab = node.at("vocab");
    const size_t n = vocab.size();
    scores_.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const JsonNode entry = vocab[i];
      if (!entry.is_array() || entry.size() != 2) entry.fail("a pair [token, score]");
      const std::string token = entry[0].as_string();
      const double score = entry[1].as_number();
      add_token(token, static_cast<uint32_t>(i));
      scores_.push_back(score);
      if (score < min_score_) min_score_ = score;
      // A later duplicate overwrites: the trie holds the id of HF's token_to_ids map.
      if (!token.empty()) trie_.insert(token, static_cast<uint32_t>(i));
    }
    if (auto u = node.get("unk_id")) {
      if (n == 0) u->fail_msg("the vocabulary is empty but unk_id is set");
      const int64_t id = u->as_int();
      if (id < 0 || static_cast<size_t>(id) >= n) u->fail_msg("unk_id is not in the vocabulary");
      unk_id_ = static_cast<uint32_t>(id);
      has_unk_ = true;
    }
    byte_fallback_ = node.bool_or("byte_fallback", false);
  }

  size_t vocab_size() const override { return scores_.size(); }

  void tokenize(std::string_view s, std::vector<uint32_t>& ids) const override {
    struct Best {
      double score = 0;
      int64_t starts_at = -1;
      uint32_t id = 0;
    };
    thread_local std::vector<Best> best;
    const size_t size = s.size();
    best.assign(size + 1, Best{});
    const double unk_score = min_score_ - 10.0;
    size_t start = 0;
    while (start < size) {
      const double till_here = best[start].score;
      const size_t mblen = utf8_len(static_cast<unsigned char>(s[start]));
      bool has_single = false;
      trie_.for_each_prefix(s.substr(start), [&](size_t length, uint32_t id) {
        const size_t key_pos = start + length;
        const double cand = scores_[id] + till_here;
        Best& target = best[key_pos];
        if (target.starts_at < 0 || cand > target.score) {
          target.score = cand;
          target.starts_at = static_cast<int64_t>(start);
          target.id = id;
        }
        if (length == mblen) has_single = true;
      });
      if (!has_single) {
        Best& target = best[start + mblen];
        const double cand = unk_score + till_here;
        if (target.starts_at < 0 || cand > target.score) {
          if (!has_unk_)
            throw InputError(
                "Unigram: a piece needs the unknown token but the model has no unk_id");
          target.score = cand;
          target.starts_at = static_cast<int64_t>(start);
          target.id = unk_id_;
        }
      }
      start += mblen;
    }
    // Backtrack; consecutive unknown pieces fuse into one string.
    thread_local std::vector<std::pair<size_t, size_t>> pieces;  // (begin, end), reversed
    pieces.clear();
    size_t end = size;
    size_t unk_end = 0;
    bool in_unk = false;
    while (end > 0) {
      const Best& b = best[end];
      const auto begin = static_cast<size_t>(b.starts_at);
      if (has_unk_ && b.id == unk_id_) {
        if (!in_unk) unk_end = end;
        in_unk = true;
      } else {
        if (in_unk) pieces.emplace_back(end, unk_end);
        in_unk = false;
        pieces.emplace_back(begin, end);
      }
      end = begin;
    }
    if (in_unk) pieces.emplace_back(0, unk_end);
    for (size_t i = pieces.size(); i-- > 0;) {
      const std::string_view piece = s.substr(pieces[i].first, pieces[i].second - pieces[i].first);
      const uint32_t id = vocab_.find(piece);
      if (id != StringIdMap::kMissing) {
        ids.push_back(id);
        continue;
      }
      if (byte_fallback_ && spell_bytes(piece, ids)) continue;
      if (!has_unk_)
        throw InputError("Unigram: a piece needs the unknown token but the model has no unk_id");
      ids.push_back(unk_id_);
    }
  }

 private:
  bool spell_bytes(std::string_view piece, std::vector<uint32_t>& ids) const {
    const size_t first = ids.size();
    for (unsigned char b : piece) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      const uint32_t id = vocab_.find(name);
      if (id == StringIdMap::kMissing) {
        ids.resize(first);
        return false;
      }
      ids.push_back(id);
    }
    return true;
  }

  std::vector<double> scores_;
  ByteTrie trie_;  // token -> id
  double min_score_ = std::numeric_limits<double>::infinity();
  uint32_t unk_id_ = 0;
  bool has_unk_ = false, byte_fallback_ = false;
};

}  // namespace

std::unique_ptr<Model> make_unigram_model(const JsonNode& node) {
  return std::make_unique<Unigram>(node);
}

}  // namespace ftune::text
