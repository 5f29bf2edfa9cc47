// Loading tokenizer.json: the pipeline parts, the added tokens (after the normalizer, which they
// may depend on) and the stored truncation / padding.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_file.h"
#include "text/tokenizer_impl.h"
#include "text/utf8.h"

namespace ftune::text {

namespace {

Side parse_side(const JsonNode& n) {
  const std::string s = n.as_string();
  if (s == "Right" || s == "right") return Side::kRight;
  if (s == "Left" || s == "left") return Side::kLeft;
  n.fail("\"Right\" or \"Left\"");
}

void read_truncation(const JsonNode& t, EncodeOptions& o) {
  const std::string strategy = t.string_or("strategy", "LongestFirst");
  if (strategy == "LongestFirst")
    o.truncation = Truncation::kLongestFirst;
  else if (strategy == "OnlyFirst")
    o.truncation = Truncation::kOnlyFirst;
  else if (strategy == "OnlySecond")
    o.truncation = Truncation::kOnlySecond;
  else
    t.at("strategy").fail("LongestFirst, OnlyFirst or OnlySecond");
  o.max_length = t.at("max_length").as_int();
  if (o.max_length < 0) t.at("max_length").fail("a non-negative integer");
  if (auto d = t.get("direction")) o.truncation_side = parse_side(*d);
}

void read_padding(const JsonNode& p, EncodeOptions& o) {
  const JsonNode strategy = p.at("strategy");
  if (strategy.is_string()) {
    if (strategy.as_string() != "BatchLongest") strategy.fail("\"BatchLongest\" or {\"Fixed\": n}");
    o.padding = Padding::kLongest;
  } else if (auto f = strategy.get("Fixed")) {
    o.padding = Padding::kMaxLength;
    o.max_length = f->as_int();
  } else {
    strategy.fail("\"BatchLongest\" or {\"Fixed\": n}");
  }
  if (auto d = p.get("direction")) o.padding_side = parse_side(*d);
  if (auto m = p.get("pad_to_multiple_of")) o.pad_to_multiple_of = m->as_int();
  o.pad_id = p.at("pad_id").as_u32();
  o.pad_type_id = static_cast<uint32_t>(p.int_or("pad_type_id", 0));
}

}  // namespace

void load_tokenizer_json(Tokenizer::Impl& impl, std::string_view json_text,
                         const std::string& name) {
  if (utf8_find_invalid(json_text) != std::string_view::npos)
    throw InputError(name + ": not valid UTF-8 (at byte " +
                     std::to_string(utf8_find_invalid(json_text)) + ")");
  const nlohmann::json j = io::parse_json(json_text, name);  // errors name file:line:column
  const JsonNode root(j, name);
  if (!root.is_object()) root.fail("an object");
  if (auto v = root.get("version"); v && v->as_string() != "1.0")
    v->fail_msg("unknown tokenizer version \"" + v->as_string() + "\" (expected \"1.0\")");

  if (auto n = root.get("normalizer")) impl.normalizer = make_normalizer(*n);
  if (auto p = root.get("pre_tokenizer")) impl.pre_tokenizer = make_pre_tokenizer(*p);
  impl.model = make_model(root.at("model"));
  if (auto p = root.get("post_processor")) impl.post_processor = make_post_processor(*p);
  if (auto d = root.get("decoder")) impl.decoder = make_decoder(*d);

  if (auto added = root.get("added_tokens")) {
    std::vector<AddedToken> tokens;
    for (size_t i = 0; i < added->size(); ++i) tokens.push_back(parse_added_token((*added)[i]));
    impl.added.add_tokens(tokens, *impl.model, impl.normalizer.get());
  }

  if (auto t = root.get("truncation")) read_truncation(*t, impl.json_options);
  if (auto p = root.get("padding")) {
    read_padding(*p, impl.json_options);
    impl.pad_id = impl.json_options.pad_id;
  }
}

}  // namespace ftune::text
