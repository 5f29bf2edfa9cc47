// TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel and Sequence post-processors.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/post_processor.h"

namespace ftune::text {

namespace {

void append(Encoding& dst, const Encoding& src) {
  dst.ids.insert(dst.ids.end(), src.ids.begin(), src.ids.end());
  dst.type_ids.insert(dst.type_ids.end(), src.type_ids.begin(), src.type_ids.end());
  dst.attention_mask.insert(dst.attention_mask.end(), src.attention_mask.begin(),
                            src.attention_mask.end());
  dst.special_tokens_mask.insert(dst.special_tokens_mask.end(), src.special_tokens_mask.begin(),
                                 src.special_tokens_mask.end());
}

void push_special(Encoding& e, uint32_t id, uint32_t type_id) {
  e.ids.push_back(id);
  e.type_ids.push_back(type_id);
  e.attention_mask.push_back(1);
  e.special_tokens_mask.push_back(1);
}

void set_type_ids(Encoding& e, uint32_t type_id) {
  e.type_ids.assign(e.ids.size(), type_id);
}

// Appends the tokens of one input sequence with the given type id.
void push_sequence(Encoding& e, const std::vector<uint32_t>& ids, uint32_t type_id) {
  e.ids.insert(e.ids.end(), ids.begin(), ids.end());
  e.type_ids.insert(e.type_ids.end(), ids.size(), type_id);
  e.attention_mask.insert(e.attention_mask.end(), ids.size(), 1);
  e.special_tokens_mask.insert(e.special_tokens_mask.end(), ids.size(), 0);
}

void clear(Encoding& e, size_t reserve) {
  e.ids.clear();
  e.type_ids.clear();
  e.attention_mask.clear();
  e.special_tokens_mask.clear();
  e.ids.reserve(reserve);
  e.type_ids.reserve(reserve);
  e.attention_mask.reserve(reserve);
  e.special_tokens_mask.reserve(reserve);
}

Encoding from_ids(const std::vector<uint32_t>& ids, uint32_t type_id) {
  Encoding e;
  push_sequence(e, ids, type_id);
  return e;
}

class TemplateProcessing final : public PostProcessor {
 public:
  struct Piece {
    bool is_sequence;
    int sequence;         // 0 = $A, 1 = $B
    std::string special;  // special token name
    uint32_t type_id;
  };
  struct Special {
    std::vector<uint32_t> ids;
  };

  TemplateProcessing(std::vector<Piece> single, std::vector<Piece> pair,
                     std::map<std::string, Special> specials)
      : single_(std::move(single)), pair_(std::move(pair)), specials_(std::move(specials)) {
    added_single_ = count_added(single_);
    added_pair_ = count_added(pair_);
  }

  size_t added_tokens(bool is_pair) const override { return is_pair ? added_pair_ : added_single_; }

  void process(const std::vector<uint32_t>& a, const std::vector<uint32_t>* b,
               bool add_special_tokens, Encoding& out) const override {
    const auto& tmpl = b ? pair_ : single_;
    clear(out, a.size() + (b ? b->size() : 0) + (b ? added_pair_ : added_single_));
    for (const Piece& p : tmpl) {
      if (p.is_sequence) {
        push_sequence(out, p.sequence == 0 ? a : *b, p.type_id);
      } else if (add_special_tokens) {
        for (uint32_t id : specials_.at(p.special).ids) push_special(out, id, p.type_id);
      }
    }
  }

  void process_encodings(std::vector<Encoding>& encodings, bool add_special_tokens) const override {
    if (encodings.size() != 1 && encodings.size() != 2)
      throw Error("TemplateProcessing: expected 1 or 2 encodings, got " +
                  std::to_string(encodings.size()));
    const auto& tmpl = encodings.size() == 2 ? pair_ : single_;
    std::vector<Encoding> out;
    out.reserve(tmpl.size());
    for (const Piece& p : tmpl) {
      if (p.is_sequence) {
        if (static_cast<size_t>(p.sequence) >= encodings.size())
          throw Error("TemplateProcessing: the single-sequence template refers to $B");
        Encoding e = encodings[p.sequence];
        set_type_ids(e, p.type_id);
        out.push_back(std::move(e));
      } else if (add_special_tokens) {
        Encoding e;
        for (uint32_t id : specials_.at(p.special).ids) push_special(e, id, p.type_id);
        out.push_back(std::move(e));
      }
    }
    encodings.swap(out);
  }

 private:
  size_t count_added(const std::vector<Piece>& t) const {
    size_t n = 0;
    for (const Piece& p : t)
      if (!p.is_sequence) n += specials_.at(p.special).ids.size();
    return n;
  }

  std::vector<Piece> single_, pair_;
  std::map<std::string, Special> specials_;
  size_t added_single_ = 0, added_pair_ = 0;
};

// BERT: [CLS] A [SEP] / B [SEP]; RoBERTa: <s> A </s> / </s> B </s> with every type id 0.
class BertLikeProcessing final : public PostProcessor {
 public:
  BertLikeProcessing(uint32_t cls, uint32_t sep, bool roberta)
      : cls_(cls), sep_(sep), roberta_(roberta) {}

  size_t added_tokens(bool is_pair) const override { return is_pair ? (roberta_ ? 4 : 3) : 2; }

  void process(const std::vector<uint32_t>& a, const std::vector<uint32_t>* b,
               bool add_special_tokens, Encoding& out) const override {
    clear(out, a.size() + (b ? b->size() : 0) + 4);
    const uint32_t pair_type = roberta_ ? 0 : 1;
    if (add_special_tokens) push_special(out, cls_, 0);
    push_sequence(out, a, 0);
    if (add_special_tokens) push_special(out, sep_, 0);
    if (!b) return;
    if (add_special_tokens && roberta_) push_special(out, sep_, 0);
    push_sequence(out, *b, pair_type);
    if (add_special_tokens) push_special(out, sep_, pair_type);
  }

  void process_encodings(std::vector<Encoding>& encodings, bool add_special_tokens) const override {
    if (roberta_)
      for (Encoding& e : encodings) set_type_ids(e, 0);
    if (!add_special_tokens) return;
    for (size_t i = 0; i < encodings.size(); ++i) {
      const Encoding& e = encodings[i];
      Encoding out;
      const uint32_t type = roberta_ ? 0 : (i == 0 ? 0 : 1);
      if (i == 0)
        push_special(out, cls_, 0);
      else if (roberta_)
        push_special(out, sep_, 0);
      append(out, e);
      push_special(out, sep_, type);
      encodings[i] = std::move(out);
    }
  }

 private:
  uint32_t cls_, sep_;
  bool roberta_;
};

class ByteLevelProcessing final : public PostProcessor {
 public:
  size_t added_tokens(bool) const override { return 0; }
  void process_encodings(std::vector<Encoding>&, bool) const override {}  // offsets only in HF
  void process(const std::vector<uint32_t>& a, const std::vector<uint32_t>* b,
               bool add_special_tokens, Encoding& out) const override {
    post_process(nullptr, a, b, add_special_tokens, out);
  }
};

class SequenceProcessing final : public PostProcessor {
 public:
  explicit SequenceProcessing(std::vector<std::unique_ptr<PostProcessor>> members)
      : members_(std::move(members)) {}
  size_t added_tokens(bool is_pair) const override {
    size_t n = 0;
    for (const auto& m : members_) n += m->added_tokens(is_pair);
    return n;
  }
  void process_encodings(std::vector<Encoding>& encodings, bool add_special_tokens) const override {
    for (const auto& m : members_) m->process_encodings(encodings, add_special_tokens);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> members_;
};

std::vector<TemplateProcessing::Piece> parse_template(const JsonNode& list) {
  std::vector<TemplateProcessing::Piece> pieces;
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonNode p = list[i];
    if (auto seq = p.get("Sequence")) {
      const std::string id = seq->at("id").as_string();
      if (id != "A" && id != "B") seq->at("id").fail("\"A\" or \"B\"");
      pieces.push_back({true, id == "A" ? 0 : 1, {}, seq->at("type_id").as_u32()});
    } else if (auto sp = p.get("SpecialToken")) {
      pieces.push_back({false, 0, sp->at("id").as_string(), sp->at("type_id").as_u32()});
    } else {
      p.fail("{\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
  }
  return pieces;
}

std::pair<std::string, uint32_t> parse_token_pair(const JsonNode& node) {
  if (!node.is_array() || node.size() != 2) node.fail("a pair [token, id]");
  return {node[0].as_string(), node[1].as_u32()};
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const JsonNode& node) {
  if (!node.is_object()) node.fail("an object with a \"type\"");
  const std::string type = node.at("type").as_string();
  if (type == "TemplateProcessing") {
    std::map<std::string, TemplateProcessing::Special> specials;
    if (auto st = node.get("special_tokens")) {
      if (!st->is_object()) st->fail("an object");
      for (auto it = st->raw().begin(); it != st->raw().end(); ++it) {
        const JsonNode tok(*it, st->path() + "[\"" + it.key() + "\"]");
        const JsonNode ids = tok.at("ids"), tokens = tok.at("tokens");
        if (ids.size() != tokens.size()) tok.fail_msg("ids and tokens must have the same length");
        TemplateProcessing::Special s;
        for (size_t i = 0; i < ids.size(); ++i) s.ids.push_back(ids[i].as_u32());
        specials[tok.at("id").as_string()] = std::move(s);
      }
    }
    auto single = parse_template(node.at("single"));
    auto pair = parse_template(node.at("pair"));
    for (const auto* t : {&single, &pair})
      for (const auto& p : *t)
        if (!p.is_sequence && !specials.count(p.special))
          node.fail_msg("template uses special token \"" + p.special +
                        "\" missing from special_tokens");
    for (const auto& p : single)
      if (p.is_sequence && p.sequence == 1)
        node.at("single").fail_msg("the single-sequence template refers to $B");
    return std::make_unique<TemplateProcessing>(std::move(single), std::move(pair),
                                                std::move(specials));
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    const auto sep = parse_token_pair(node.at("sep"));
    const auto cls = parse_token_pair(node.at("cls"));
    return std::make_unique<BertLikeProcessing>(cls.second, sep.second,
                                                type == "RobertaProcessing");
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelProcessing>();
  if (type == "Sequence") {
    const JsonNode list = node.at("processors");
    std::vector<std::unique_ptr<PostProcessor>> members;
    for (size_t i = 0; i < list.size(); ++i) members.push_back(make_post_processor(list[i]));
    return std::make_unique<SequenceProcessing>(std::move(members));
  }
  node.at("type").fail_msg(
      "unknown post-processor type \"" + type +
      "\" (known: TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence)");
}

void PostProcessor::process(const std::vector<uint32_t>& a, const std::vector<uint32_t>* b,
                            bool add_special_tokens, Encoding& out) const {
  std::vector<Encoding> encs;
  encs.push_back(from_ids(a, 0));
  if (b) encs.push_back(from_ids(*b, 1));
  process_encodings(encs, add_special_tokens);
  clear(out, 0);
  for (const Encoding& e : encs) append(out, e);
}

void post_process(const PostProcessor* processor, const std::vector<uint32_t>& a,
                  const std::vector<uint32_t>* b, bool add_special_tokens, Encoding& out) {
  if (processor) {
    processor->process(a, b, add_special_tokens, out);
    return;
  }
  clear(out, a.size() + (b ? b->size() : 0));
  push_sequence(out, a, 0);
  if (b) push_sequence(out, *b, 1);
}

}  // namespace ftune::text
