// Parity with Hugging Face: every golden case of tools/make_tokenizer_fixtures.py (defaults,
// pairs, no special tokens, truncation strategies and sides, padding, batch padding, decoding)
// must give exactly HF's ids, type ids and masks. Tokenizers from ../shared are skipped, with a
// message, when that directory is absent.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "core/thread_pool.h"
#include "test_util.h"
#include "text/tokenizer.h"
#include "text/tokenizer_fixtures.h"

namespace ftune::text {
namespace {

using nlohmann::json;
using test::fixture_corpus;

std::vector<uint32_t> expand(const json& rle) {
  std::vector<uint32_t> v;
  for (const auto& run : rle) v.insert(v.end(), run[1].get<size_t>(), run[0].get<uint32_t>());
  return v;
}

template <class T>
std::vector<uint32_t> widen(const std::vector<T>& v) {
  return std::vector<uint32_t>(v.begin(), v.end());
}

std::string show(const std::vector<uint32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string quoted(const std::string& s) {
  return json(s).dump(-1, ' ', true, json::error_handler_t::replace);
}

struct Source {
  std::string name;
  std::string path;  // file or directory to load
  std::string skip;  // non-empty: why the test is skipped
  std::unique_ptr<test::TempDir> temp;
};

Source locate(const std::string& name, const json& header) {
  Source s;
  s.name = name;
  const std::string fixtures = test::tokenizer_fixtures_dir();
  const std::string source = header.value("source", "fixtures");
  if (source == "fixtures") {
    s.path = fixtures + "/" + name;
    return s;
  }
  const auto shared = test::shared_tokenizers_dir();
  if (!shared) {
    s.skip =
        "shared tokenizer fixtures not found: set FTUNE_SHARED_DIR or provide "
        "<repo>/../shared/fixtures/tokenizers";
    return s;
  }
  if (name == "llama2_config") {
    // Llama-2's tokenizer.json next to the tokenizer_config.json recorded in the golden header.
    s.temp = std::make_unique<test::TempDir>();
    std::filesystem::copy_file(*shared + "/llama2.tokenizer.json",
                               s.temp->path() + "/tokenizer.json");
    std::ofstream(s.temp->path() + "/tokenizer_config.json")
        << header.at("tokenizer_config").dump();
    s.path = s.temp->path();
    return s;
  }
  s.path = *shared + "/" + name + ".tokenizer.json";
  if (!std::filesystem::exists(s.path)) s.skip = s.path + " not found";
  return s;
}

class TokenizerParity : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerParity, MatchesHuggingFace) {
  const std::string name = GetParam();
  const auto records =
      test::read_jsonl_gz(test::tokenizer_fixtures_dir() + "/golden/" + name + ".jsonl.gz");
  ASSERT_FALSE(records.empty());
  const json& header = records[0];
  Source src = locate(name, header);
  if (!src.skip.empty()) GTEST_SKIP() << name << ": " << src.skip;
  const Tokenizer tok = Tokenizer::from_path(src.path);
  const auto& texts = fixture_corpus();

  std::map<std::string, std::pair<size_t, size_t>> counts;  // kind -> (identical, total)
  size_t reported = 0;
  auto check = [&](const std::string& kind, bool ok, const std::function<std::string()>& detail) {
    auto& c = counts[kind];
    ++c.second;
    if (ok) {
      ++c.first;
    } else if (reported++ < 12) {
      ADD_FAILURE() << name << " [" << kind << "] " << detail();
    }
  };
  auto text_of = [&](const json& idx) -> std::optional<std::string_view> {
    if (idx.is_null()) return std::nullopt;
    return std::string_view(texts.at(idx.get<size_t>()));
  };

  for (size_t r = 1; r < records.size(); ++r) {
    const json& c = records[r];
    const std::string k = c.at("k");
    if (k == "s" || k == "p" || k == "n") {
      EncodeOptions o = tok.default_options();
      o.add_special_tokens = k != "n";
      const auto text = *text_of(c.at("i"));
      const auto pair = c.contains("j") ? text_of(c.at("j")) : std::nullopt;
      const Encoding e = tok.encode(text, pair, o);
      const auto want = c.at("ids").get<std::vector<uint32_t>>();
      const auto want_tt = expand(c.at("tt"));
      check(k, e.ids == want && e.type_ids == want_tt, [&] {
        return "text " + quoted(std::string(text)) +
               (pair ? " pair " + quoted(std::string(*pair)) : "") + "\n  want " + show(want) +
               " types " + show(want_tt) + "\n  got  " + show(e.ids) + " types " + show(e.type_ids);
      });
    } else if (k == "t") {
      EncodeOptions o = tok.default_options();
      const std::string strat = c.at("strat");
      o.truncation = strat == "longest_first" ? Truncation::kLongestFirst
                     : strat == "only_first"  ? Truncation::kOnlyFirst
                                              : Truncation::kOnlySecond;
      o.max_length = c.at("max");
      o.truncation_side = c.at("side") == "left" ? Side::kLeft : Side::kRight;
      const auto text = *text_of(c.at("i"));
      const auto pair = text_of(c.at("j"));
      std::optional<Encoding> e;
      std::string error;
      try {
        e = tok.encode(text, pair, o);
      } catch (const std::exception& ex) {
        error = ex.what();
      }
      if (c.contains("err")) {
        check("t", !e.has_value(),
              [&] { return "expected an error for " + c.dump() + ", got " + show(e->ids); });
      } else {
        const auto want = c.at("ids").get<std::vector<uint32_t>>();
        check("t",
              e && e->ids == want && e->type_ids == expand(c.at("tt")) &&
                  widen(e->special_tokens_mask) == expand(c.at("stm")),
              [&] {
                return c.dump().substr(0, 300) + "\n  got " +
                       (e ? show(e->ids) : "error: " + error);
              });
      }
    } else if (k == "pad") {
      EncodeOptions o = tok.default_options();
      if (c.at("max").is_null()) {
        o.padding = Padding::kLongest;
      } else {
        o.padding = Padding::kMaxLength;
        o.max_length = c.at("max");
      }
      if (!c.at("mult").is_null()) o.pad_to_multiple_of = c.at("mult");
      o.padding_side = c.at("side") == "left" ? Side::kLeft : Side::kRight;
      const Encoding e = tok.encode(*text_of(c.at("i")), text_of(c.at("j")), o);
      check("pad",
            e.ids == c.at("ids").get<std::vector<uint32_t>>() && e.type_ids == expand(c.at("tt")) &&
                widen(e.attention_mask) == expand(c.at("am")) &&
                widen(e.special_tokens_mask) == expand(c.at("stm")),
            [&] {
              return c.dump().substr(0, 300) + "\n  got " + show(e.ids) + " am " +
                     show(widen(e.attention_mask));
            });
    } else if (k == "b") {
      std::vector<TextPair> batch;
      for (size_t q = 0; q < c.at("is").size(); ++q) {
        TextPair tp{texts.at(c["is"][q].get<size_t>()), std::nullopt};
        if (!c.at("js").is_null()) tp.pair = texts.at(c["js"][q].get<size_t>());
        batch.push_back(std::move(tp));
      }
      EncodeOptions o = tok.default_options();
      o.padding = Padding::kLongest;
      const auto out = tok.encode_batch(batch, o);
      bool ok = out.size() == c.at("ids").size();
      for (size_t q = 0; ok && q < out.size(); ++q)
        ok = out[q].ids == c["ids"][q].get<std::vector<uint32_t>>() &&
             widen(out[q].attention_mask) == expand(c["am"][q]);
      check("b", ok, [&] { return c.dump().substr(0, 300); });
    } else if (k == "d") {
      const auto ids = c.at("ids").get<std::vector<uint32_t>>();
      const std::string got = tok.decode(ids, c.at("skip").get<int>() != 0);
      const std::string want = c.at("text");
      check("d", got == want, [&] {
        return "decode " + show(ids) + "\n  want " + quoted(want) + "\n  got  " + quoted(got);
      });
    }
  }
  std::string summary = name + ":";
  size_t same = 0, total = 0;
  for (const auto& [kind, c] : counts) {
    summary += " " + kind + " " + std::to_string(c.first) + "/" + std::to_string(c.second);
    same += c.first;
    total += c.second;
  }
  std::printf("[ parity ] %s  (identical %zu/%zu)\n", summary.c_str(), same, total);
  EXPECT_EQ(same, total);
}

INSTANTIATE_TEST_SUITE_P(Golden, TokenizerParity,
                         ::testing::Values("minilm", "roberta_bpe", "wordpiece_cased",
                                           "unigram_precompiled", "pipeline_a", "pipeline_b",
                                           "pipeline_c", "gemma3", "llama2", "llama3",
                                           "llama2_config", "modernbert_bpe"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ftune::text
