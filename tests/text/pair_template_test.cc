// Pair templates (text/pair_template.h): on the real Gemma 3 and Llama 3 tokenizers the pieces
// give transformers' ids of the joined string (tests/fixtures/tokenizers/pair_template.json,
// tools/make_pair_template_fixtures.py); truncation cuts the texts longest-first and keeps the
// template; malformed templates name the problem.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "io/json_file.h"
#include "text/pair_template.h"
#include "tokenizer_fixtures.h"

namespace ftune::text {
namespace {

TEST(PairTemplate, GivesTransformersIdsOfTheJoinedString) {
  const auto shared = test::shared_tokenizers_dir();
  if (!shared) GTEST_SKIP() << "shared tokenizer fixtures not found (FTUNE_SHARED_DIR)";
  const nlohmann::json cases =
      io::read_json_file(test::tokenizer_fixtures_dir() + "/pair_template.json")["cases"];
  std::map<std::string, Tokenizer> toks;
  int checked = 0;
  for (const auto& c : cases) {
    const std::string name = c["tokenizer"];
    if (!toks.count(name))
      toks.emplace(name, Tokenizer::from_file(*shared + "/" + name + ".tokenizer.json"));
    const PairTemplate t = PairTemplate::parse(c["template"], "data.pair_template");
    const std::vector<Encoding> e = t.encode_batch(
        toks.at(name), {{c["text"].get<std::string>(), c["text_pair"].get<std::string>()}}, 0);
    const std::vector<uint32_t> want = c["ids"].get<std::vector<uint32_t>>();
    EXPECT_EQ(e[0].ids, want) << name << " " << c["template"] << " " << c["text"];
    EXPECT_EQ(e[0].type_ids, std::vector<uint32_t>(want.size(), 0));
    ++checked;
  }
  EXPECT_EQ(checked, 16);

  // Longest-first truncation of the texts; the template's tokens stay, <eos> last for pooling.
  const Tokenizer& gemma = toks.at("gemma3");
  const PairTemplate t = PairTemplate::parse("<bos>{text}\n{text_pair}<eos>", "t");
  const std::string long_text = "one two three four five six seven eight nine ten eleven twelve";
  const Encoding full = t.encode_batch(gemma, {{long_text, "short pair"}}, 0)[0];
  const Encoding cut = t.encode_batch(gemma, {{long_text, "short pair"}}, 12)[0];
  ASSERT_GT(full.size(), 12u);
  EXPECT_EQ(cut.size(), 12u);
  EXPECT_EQ(cut.ids.front(), *gemma.token_to_id("<bos>"));
  EXPECT_EQ(cut.ids.back(), *gemma.token_to_id("<eos>"));
  // The short pair is whole ("\n", "short", " pair", <eos>); the long text lost its tail.
  EXPECT_EQ(std::vector<uint32_t>(full.ids.end() - 4, full.ids.end()),
            std::vector<uint32_t>(cut.ids.end() - 4, cut.ids.end()));
  EXPECT_EQ(std::vector<uint32_t>(full.ids.begin(), full.ids.begin() + 8),
            std::vector<uint32_t>(cut.ids.begin(), cut.ids.begin() + 8));
  EXPECT_THROW(t.encode_batch(gemma, {{long_text, "x"}}, 3), InputError);
  // A single-text example renders {text_pair} empty.
  const Encoding single = t.encode_batch(gemma, {{"hello", std::nullopt}}, 0)[0];
  EXPECT_EQ(single.ids.back(), *gemma.token_to_id("<eos>"));
}

TEST(PairTemplate, MalformedTemplatesNameTheProblem) {
  const std::pair<const char*, const char*> bad[] = {
      {"{text_pair}", "no {text}"},
      {"{text} {text}", "'{text}' appears twice"},
      {"{text} {label}", "unknown placeholder '{label}'"},
      {"{text", "unmatched '{'"},
      {"{text} }", "unmatched '}'"},
  };
  for (const auto& [spec, message] : bad) {
    try {
      PairTemplate::parse(spec, "cfg.yaml: data.pair_template");
      ADD_FAILURE() << spec;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("data.pair_template"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(PairTemplate::parse("{{x}} {text}", "t").spec(), "{{x}} {text}");
}

}  // namespace
}  // namespace ftune::text
