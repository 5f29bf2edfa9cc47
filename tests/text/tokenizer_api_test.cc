// The public Tokenizer API: loading and its errors, options, batch encoding on thread pools,
// concurrent use, vocabulary queries and decoding.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/thread_pool.h"
#include "test_util.h"
#include "text/tokenizer.h"
#include "text/tokenizer_fixtures.h"

namespace ftune::text {
namespace {

std::string fixture(const std::string& name) {
  return test::tokenizer_fixtures_dir() + "/" + name;
}

// The message of the InputError `f` raises (empty when it does not raise).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A minimal WordLevel tokenizer.json with the given extra top-level members.
std::string word_level(const std::string& extra = "") {
  return R"({"version":"1.0","model":{"type":"WordLevel","vocab":{"<unk>":0,"a":1,"b":2},"unk_token":"<unk>"},
            "pre_tokenizer":{"type":"WhitespaceSplit"})" +
         extra + "}";
}

TEST(TokenizerLoad, FileDirectoryAndErrors) {
  EXPECT_NO_THROW(Tokenizer::from_path(fixture("minilm")));
  EXPECT_NO_THROW(Tokenizer::from_path(fixture("minilm") + "/tokenizer.json"));
  EXPECT_NE(error_of([] { Tokenizer::from_path("/nonexistent/dir"); }).find("/nonexistent/dir"),
            std::string::npos);
  test::TempDir dir;
  EXPECT_NE(error_of([&] { Tokenizer::from_dir(dir.path()); }).find("no tokenizer.json"),
            std::string::npos);
}

TEST(TokenizerLoad, MalformedJsonNamesTheKeyAndWhatWasExpected) {
  EXPECT_NE(error_of([] {
              Tokenizer::from_json("{not json", {}, "t.json");
            }).find("t.json:1:3: invalid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([] { Tokenizer::from_json("[]", {}, "t.json"); }).find("expected an object"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { Tokenizer::from_json("{}", {}, "t.json"); }).find("missing key \"model\""),
      std::string::npos);
  EXPECT_NE(
      error_of([] {
        Tokenizer::from_json(
            word_level(
                R"(,"normalizer":{"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"Bogus"}]})"),
            {}, "t.json");
      }).find("t.json: normalizer.normalizers[1].type: unknown normalizer type \"Bogus\""),
      std::string::npos);
  EXPECT_NE(error_of([] {
              Tokenizer::from_json(
                  R"({"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[["a","c"]]}})", {},
                  "t.json");
            }).find("t.json: model.merges[0]: merge token \"c\" is not in the vocabulary"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Tokenizer::from_json(word_level(R"(,"post_processor":{"type":"TemplateProcessing",
                  "single":[{"SpecialToken":{"id":"[X]","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],
                  "pair":[{"Sequence":{"id":"A","type_id":0}},{"Sequence":{"id":"B","type_id":1}}],"special_tokens":{}})"),
                                   {}, "t.json");
            }).find("special token \"[X]\" missing from special_tokens"),
            std::string::npos);
  EXPECT_NE(
      error_of([] {
        Tokenizer::from_json(
            word_level(
                R"(,"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(a"},"behavior":"Isolated","invert":false})"),
            {}, "t.json");
      }).find("t.json: pre_tokenizer.pattern.Regex: invalid regex"),
      std::string::npos);
  EXPECT_NE(error_of([] {
              Tokenizer::from_json(
                  R"({"model":{"type":"Unigram","vocab":[["a",-1.0]],"unk_id":3}})", {}, "t.json");
            }).find("unk_id is not in the vocabulary"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Tokenizer::from_json(R"({"model":{"type":"WordPiece","vocab":{"a":"x"}}})", {},
                                   "t.json");
            }).find("model.vocab[\"a\"]: expected a non-negative integer id"),
            std::string::npos);
}

// Found by fuzz/fuzz_tokenizer_json: a number too large for a double escaped as a JSON library
// exception instead of InputError.
TEST(TokenizerLoad, FuzzRegressionNumberOutOfRange) {
  EXPECT_NE(error_of([] {
              Tokenizer::from_json(
                  R"({"model": {"type": "Unigram", "vocab": [["a", -3.277e597409120332]]}})");
            }).find("invalid JSON"),
            std::string::npos);
}

TEST(TokenizerOptions, DefaultsAreTransformersAndStoredSettingsAreAvailable) {
  const Tokenizer tok = Tokenizer::from_path(fixture("minilm"));
  // MiniLM's tokenizer.json stores truncation and padding to 128, which tokenizer(text) ignores.
  const Encoding plain = tok.encode("A short sentence.");
  EXPECT_EQ(plain.ids, (std::vector<uint32_t>{101, 1037, 2460, 6251, 1012, 102}));
  const EncodeOptions stored = tok.tokenizers_options();
  EXPECT_EQ(stored.truncation, Truncation::kLongestFirst);
  EXPECT_EQ(stored.padding, Padding::kMaxLength);
  EXPECT_EQ(stored.max_length, 128);
  const Encoding padded = tok.encode("A short sentence.", std::nullopt, stored);
  EXPECT_EQ(padded.size(), 128u);
  EXPECT_EQ(padded.attention_mask[5], 1);
  EXPECT_EQ(padded.attention_mask[6], 0);
  EXPECT_EQ(padded.ids[127], 0u);
  EXPECT_EQ(tok.model_max_length(), 512);
  EXPECT_EQ(tok.pad_id(), 0u);
  EXPECT_EQ(tok.vocab_size(), 30522u);
  EXPECT_EQ(tok.token_to_id("[CLS]"), 101u);
  EXPECT_EQ(tok.id_to_token(102), "[SEP]");
  EXPECT_EQ(tok.token_to_id("no-such-token"), std::nullopt);
  EXPECT_EQ(tok.num_special_tokens(false), 2u);
  EXPECT_EQ(tok.num_special_tokens(true), 3u);

  // Truncation without max_length uses model_max_length, as transformers' truncation=True.
  EncodeOptions o = tok.default_options();
  o.truncation = Truncation::kLongestFirst;
  std::string long_text;
  for (int i = 0; i < 600; ++i) long_text += "word ";
  EXPECT_EQ(tok.encode(long_text, std::nullopt, o).size(), 512u);
  o.truncation = Truncation::kOnlySecond;
  o.max_length = 16;
  EXPECT_NE(error_of([&] { tok.encode(long_text, std::nullopt, o); }).find("no second sequence"),
            std::string::npos);
}

TEST(TokenizerConfig, SplitSpecialTokensMatchesTransformers) {
  // transformers 5.23, AutoTokenizer with split_special_tokens=True in tokenizer_config.json.
  std::ifstream json(fixture("minilm") + "/tokenizer.json"),
      config(fixture("minilm") + "/tokenizer_config.json");
  std::stringstream j, c;
  j << json.rdbuf();
  c << config.rdbuf();
  std::string cfg = c.str();
  cfg.insert(cfg.find('{') + 1, "\"split_special_tokens\": true, ");
  const Tokenizer split = Tokenizer::from_json(j.str(), cfg);
  EXPECT_EQ(split.encode("[CLS] hello [SEP] [MASK]").ids,
            (std::vector<uint32_t>{101, 1031, 18856, 2015, 1033, 7592, 1031, 19802, 1033, 1031,
                                   7308, 1033, 102}));
  const Tokenizer plain = Tokenizer::from_json(j.str(), c.str());
  EXPECT_EQ(plain.encode("[CLS] hello [SEP] [MASK]").ids,
            (std::vector<uint32_t>{101, 101, 7592, 102, 103, 102}));
}

TEST(TokenizerOptions, ErrorsWhenNothingToPadWithOrNoLimit) {
  const Tokenizer tok = Tokenizer::from_json(word_level());
  EncodeOptions o;
  o.padding = Padding::kMaxLength;
  o.max_length = 5;
  EXPECT_NE(error_of([&] { tok.encode("a b", std::nullopt, o); }).find("no pad token"),
            std::string::npos);
  o.pad_id = 0;
  EXPECT_EQ(tok.encode("a b", std::nullopt, o).ids, (std::vector<uint32_t>{1, 2, 0, 0, 0}));
  EncodeOptions t;
  t.truncation = Truncation::kLongestFirst;
  EXPECT_NE(error_of([&] { tok.encode("a b", std::nullopt, t); }).find("model_max_length"),
            std::string::npos);
}

TEST(TokenizerBatch, EqualsEncodeOneByOneOnAnyPool) {
  const Tokenizer tok = Tokenizer::from_path(fixture("roberta_bpe"));
  const auto& texts = test::fixture_corpus();
  std::vector<TextPair> batch;
  for (size_t i = 0; i < 700; ++i)
    batch.push_back({texts[i], i % 3 ? std::nullopt : std::optional<std::string>(texts[i + 1])});
  EncodeOptions o = tok.default_options();
  o.truncation = Truncation::kLongestFirst;
  o.max_length = 40;
  for (int threads : {1, 3, 8}) {
    ThreadPool pool(threads);
    const auto out = tok.encode_batch(batch, o, &pool);
    ASSERT_EQ(out.size(), batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      std::optional<std::string_view> pair;
      if (batch[i].pair) pair = *batch[i].pair;
      ASSERT_EQ(out[i].ids, tok.encode(batch[i].text, pair, o).ids)
          << "input " << i << " threads " << threads;
    }
  }
  // Padding::kLongest pads every encoding to the longest of the batch.
  o.padding = Padding::kLongest;
  const auto padded = tok.encode_batch(batch, o);
  for (const auto& e : padded) EXPECT_EQ(e.size(), padded[0].size());
  EXPECT_TRUE(tok.encode_batch({}, o).empty());
}

TEST(TokenizerBatch, ConcurrentEncodeFromManyThreads) {
  const Tokenizer tok = Tokenizer::from_path(fixture("unigram_precompiled"));
  const auto& texts = test::fixture_corpus();
  std::vector<std::vector<uint32_t>> expected;
  for (size_t i = 0; i < 300; ++i) expected.push_back(tok.encode(texts[i]).ids);
  std::vector<std::thread> workers;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 6; ++t) {
    workers.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round)
        for (size_t i = t; i < expected.size(); i += 2)
          if (tok.encode(texts[i]).ids != expected[i]) ++mismatches;
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(TokenizerDecode, ByteLevelRoundTripAndSpecialTokens) {
  const Tokenizer tok = Tokenizer::from_path(fixture("roberta_bpe"));
  EncodeOptions no_special = tok.default_options();
  no_special.add_special_tokens = false;
  for (const std::string s : {"Hello world", " leading and trailing ",
                              "\xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80 \xE4\xBD\xA0"}) {
    EXPECT_EQ(tok.decode(tok.encode(s, std::nullopt, no_special).ids), s);
    EXPECT_EQ(tok.decode(tok.encode(s).ids, true), s);
  }
  EXPECT_EQ(tok.decode(tok.encode("x").ids, false), "<s>x</s>");
  EXPECT_EQ(tok.decode({999999}), "");  // unknown ids are dropped
}

}  // namespace
}  // namespace ftune::text
