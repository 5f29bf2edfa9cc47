// Prompt -> completion rows for causal-LM fine-tuning (data/completions.h): on the real Llama 3 and
// Gemma 3 tokenizers the ids and shifted labels are TRL's completion-only ones
// (tests/fixtures/causal_lm/completions.json, tools/make_causal_lm_fixtures.py); JSONL, TSV and
// CSV read alike; a row without its completion, and a completion truncated away entirely, are
// errors naming file:line; batches pad with -100 labels. Text rendered by a chat template
// tokenizes as TRL tokenizes a conversational row (tests/fixtures/chat, tools/make_chat_fixtures.py:
// no special tokens, no EOS, the mask from the ids' common prefix); a doubled BOS and a JSONL row
// of chat messages are refused.
#include "data/completions.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "io/json_file.h"
#include "test_util.h"

namespace ftune::data {
namespace completions_test {

std::string write(const test::TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// The shared Llama 3 and Gemma 3 tokenizers (FTUNE_SHARED_DIR), loaded once each by name; ""
// from shared_tokenizers_dir when they are not there.
std::string shared_tokenizers_dir() {
  const char* env = std::getenv("FTUNE_SHARED_DIR");
  const std::string dir =
      (env ? std::string(env) : test::source_dir() + "/../shared") + "/fixtures/tokenizers";
  return std::filesystem::exists(dir + "/llama3.tokenizer.json") ? dir : "";
}

const text::Tokenizer& shared_tokenizer(const std::string& name) {
  static std::map<std::string, text::Tokenizer> loaded;
  if (!loaded.count(name))
    loaded.emplace(name,
                   text::Tokenizer::from_file(shared_tokenizers_dir() + "/" + name + ".tokenizer.json"));
  return loaded.at(name);
}

TEST(Completions, TrlIdsAndLabelsOnRealTokenizers) {
  if (shared_tokenizers_dir().empty())
    GTEST_SKIP() << "shared tokenizer fixtures not found (FTUNE_SHARED_DIR)";
  const nlohmann::json cases =
      io::read_json_file(test::fixtures_dir() + "/causal_lm/completions.json")["cases"];
  for (const auto& c : cases) {
    const std::string name = c["tokenizer"];
    const text::Tokenizer& tok = shared_tokenizer(name);
    const auto eos = tok.token_to_id(c["eos"].get<std::string>());
    ASSERT_TRUE(eos.has_value());
    const TokenizedCompletion t = tokenize_completion(
        tok, {c["prompt"], c["completion"], 7}, static_cast<int32_t>(*eos), 0, "x.jsonl");
    EXPECT_EQ(t.input_ids, c["input_ids"].get<std::vector<int32_t>>()) << name << " " << c["prompt"];
    EXPECT_EQ(t.token_labels, c["token_labels"].get<std::vector<int32_t>>()) << name;
  }
  EXPECT_EQ(cases.size(), 8u);
}

TEST(Completions, JsonlTsvAndCsvReadAlike) {
  test::TempDir dir;
  const auto j = read_completions(
      write(dir, "a.jsonl", "{\"q\": \"Is it?\", \"a\": \" yes\"}\n\n{\"q\": \"\", \"a\": \"x\"}\n"),
      DataFormat::kAuto, true, {"q", "a"});
  const auto t = read_completions(write(dir, "a.tsv", "q\ta\nIs it?\t yes\n\tx\n"),
                                  DataFormat::kAuto, true, {"q", "a"});
  const auto c = read_completions(write(dir, "a.csv", "a,q\n\" yes\",Is it?\nx,\n"),
                                  DataFormat::kAuto, true, {"q", "a"});
  for (const auto* rows : {&j, &t, &c}) {
    ASSERT_EQ(rows->size(), 2u);
    EXPECT_EQ((*rows)[0].prompt, "Is it?");
    EXPECT_EQ((*rows)[0].completion, " yes");
    EXPECT_EQ((*rows)[1].prompt, "");
    EXPECT_EQ((*rows)[1].completion, "x");
  }
  EXPECT_EQ(j[1].line, 3);  // the blank line counts
}

TEST(Completions, ARowWithoutItsCompletionNamesFileLineAndKey) {
  test::TempDir dir;
  const std::string p = write(dir, "bad.jsonl", "{\"prompt\": \"a\", \"completion\": \"b\"}\n"
                                                "{\"prompt\": \"c\"}\n");
  const std::string e = error_of([&] { read_completions(p, DataFormat::kAuto, true, {}); });
  EXPECT_NE(e.find(p + ":2"), std::string::npos) << e;
  EXPECT_NE(e.find("'completion'"), std::string::npos) << e;
  const std::string empty = write(dir, "empty.jsonl", "{\"prompt\": \"a\", \"completion\": \"\"}\n");
  EXPECT_NE(error_of([&] { read_completions(empty, DataFormat::kAuto, true, {}); }).find(":1: key "
                                                                                         "'completion' is empty"),
            std::string::npos);
  const std::string tsv = write(dir, "bad.tsv", "prompt\tcompletion\na\tb\nc\t\n");
  const std::string et = error_of([&] { read_completions(tsv, DataFormat::kAuto, true, {}); });
  EXPECT_NE(et.find(tsv + ":3"), std::string::npos) << et;
  EXPECT_NE(error_of([&] { read_completions(tsv, DataFormat::kAuto, true, {"prompt", "answer"}); })
                .find("no column 'answer'"),
            std::string::npos);
}

// A toy tokenizer: one id per byte-level word, BOS added, so lengths are easy to see.
text::Tokenizer word_tokenizer() {
  return text::Tokenizer::from_json(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 0, "content": "<pad>", "special": true, "single_word": false,
                      "lstrip": false, "rstrip": false, "normalized": false},
                     {"id": 1, "content": "<s>", "special": true, "single_word": false,
                      "lstrip": false, "rstrip": false, "normalized": false},
                     {"id": 2, "content": "</s>", "special": true, "single_word": false,
                      "lstrip": false, "rstrip": false, "normalized": false}],
    "normalizer": null,
    "pre_tokenizer": {"type": "WhitespaceSplit"},
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                  {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                {"Sequence": {"id": "B", "type_id": 0}}],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": null,
    "model": {"type": "WordLevel", "unk_token": "<pad>",
              "vocab": {"<pad>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4, "c": 5, "d": 6, "e": 7}}
  })");
}

TEST(Completions, PromptMaskedEosAppendedAndTruncation) {
  const text::Tokenizer tok = word_tokenizer();
  // <s> a b | c d </s>: the last prompt token predicts c, then d, then </s>.
  const TokenizedCompletion t = tokenize_completion(tok, {"a b", " c d", 5}, 2, 0, "f.jsonl");
  EXPECT_EQ(t.input_ids, (std::vector<int32_t>{1, 3, 4, 5, 6, 2}));
  EXPECT_EQ(t.token_labels, (std::vector<int32_t>{-100, -100, 5, 6, 2, -100}));
  EXPECT_EQ(t.prompt_tokens, 3);
  // Cut at 4 tokens: only c is left to learn.
  const TokenizedCompletion cut = tokenize_completion(tok, {"a b", " c d", 5}, 2, 4, "f.jsonl");
  EXPECT_EQ(cut.input_ids, (std::vector<int32_t>{1, 3, 4, 5}));
  EXPECT_EQ(cut.token_labels, (std::vector<int32_t>{-100, -100, 5, -100}));
  // Cut at the prompt's end: nothing left, an error naming file:line and the limit.
  const std::string e = error_of([&] { tokenize_completion(tok, {"a b", " c d", 5}, 2, 3, "f.jsonl"); });
  EXPECT_NE(e.find("f.jsonl:5"), std::string::npos) << e;
  EXPECT_NE(e.find("data.max_length is 3"), std::string::npos) << e;

  const Batch b = completion_batch({t, cut}, 0);
  EXPECT_EQ(b.size, 2);
  EXPECT_EQ(b.seq_len, 6);
  EXPECT_EQ(b.input_ids, (std::vector<int32_t>{1, 3, 4, 5, 6, 2, 1, 3, 4, 5, 0, 0}));
  EXPECT_EQ(b.attention_mask, (std::vector<int32_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(b.token_labels,
            (std::vector<int32_t>{-100, -100, 5, 6, 2, -100, -100, -100, 5, -100, -100, -100}));
}

TEST(Completions, ChatRenderedRowsTokenizeAsTrl) {
  if (shared_tokenizers_dir().empty())
    GTEST_SKIP() << "shared tokenizer fixtures not found (FTUNE_SHARED_DIR)";
  const nlohmann::json cases =
      io::read_json_file(test::fixtures_dir() + "/chat/chat_cases.json")["cases"];
  int checked = 0, parted = 0;
  for (const auto& c : cases) {
    if (c.contains("error")) continue;
    const std::string name = c["tokenizer"];
    // The row python -m ftune.chat writes: the prompt is the texts' common prefix.
    const std::string prompt = c["prompt_text"], full = c["full_text"];
    const size_t cut = std::mismatch(prompt.begin(), prompt.end(), full.begin(), full.end()).first -
                       prompt.begin();
    parted += cut < prompt.size() ? 1 : 0;
    const TokenizedCompletion t =
        tokenize_completion(shared_tokenizer(name), {full.substr(0, cut), full.substr(cut), 3}, -1, 0,
                            "chat.jsonl", {false, false});
    const std::string what = c["template"].get<std::string>() + " row " + c["index"].dump();
    EXPECT_EQ(t.input_ids, c["input_ids"].get<std::vector<int32_t>>()) << what;
    EXPECT_EQ(t.prompt_tokens, c["prompt_tokens"].get<int64_t>()) << what;
    EXPECT_EQ(t.token_labels, c["token_labels"].get<std::vector<int32_t>>()) << what;
    ++checked;
  }
  EXPECT_EQ(checked, 23);
  EXPECT_EQ(parted, 1);  // the generation prompt's empty thinking block, which the reply lacks
}

TEST(Completions, MaskStartsWhereTheTokenizationsPart) {
  const text::Tokenizer tok = word_tokenizer();
  // "a b" + "c d" is "a bc d": the prompt's "b" becomes the unknown "bc" in the whole, so the
  // ids part after <s> a (TRL's common prefix), not after the prompt's 3 tokens.
  const TokenizedCompletion t = tokenize_completion(tok, {"a b", "c d", 4}, 2, 0, "f.jsonl");
  EXPECT_EQ(t.input_ids, (std::vector<int32_t>{1, 3, 0, 6, 2}));
  EXPECT_EQ(t.prompt_tokens, 2);
  EXPECT_EQ(t.token_labels, (std::vector<int32_t>{-100, 0, 6, 2, -100}));
}

TEST(Completions, RenderedTextWithoutSpecialTokensAndDoubledBosRefused) {
  const text::Tokenizer tok = word_tokenizer();
  // A rendered row carries its own <s> and end of turn: no BOS added, no EOS appended.
  const TokenizedCompletion t =
      tokenize_completion(tok, {"<s> a b", " c d", 9}, 2, 0, "r.jsonl", {false, false});
  EXPECT_EQ(t.input_ids, (std::vector<int32_t>{1, 3, 4, 5, 6}));
  EXPECT_EQ(t.token_labels, (std::vector<int32_t>{-100, -100, 5, 6, -100}));
  // The same text with the tokenizer's special tokens: <s> twice, refused naming the key.
  const std::string e = error_of([&] { tokenize_completion(tok, {"<s> a b", " c d", 9}, 2, 0, "r.jsonl"); });
  EXPECT_NE(e.find("r.jsonl:9"), std::string::npos) << e;
  EXPECT_NE(e.find("'<s>'"), std::string::npos) << e;
  EXPECT_NE(e.find("data.add_special_tokens: false"), std::string::npos) << e;
}

TEST(Completions, ChatMessageRowsAreRefusedNamingTheRenderer) {
  test::TempDir dir;
  const std::string messages = write(
      dir, "chat.jsonl",
      "{\"prompt\": \"p\", \"completion\": \"c\"}\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
  std::string e = error_of([&] { read_completions(messages, DataFormat::kJsonl, true, {}); });
  EXPECT_NE(e.find("chat.jsonl:2: key 'messages'"), std::string::npos) << e;
  EXPECT_NE(e.find("python -m ftune.chat"), std::string::npos) << e;
  const std::string lists = write(
      dir, "conv.jsonl",
      "{\"prompt\": [{\"role\": \"user\", \"content\": \"hi\"}], \"completion\": "
      "[{\"role\": \"assistant\", \"content\": \"yo\"}]}\n");
  e = error_of([&] { read_completions(lists, DataFormat::kJsonl, true, {}); });
  EXPECT_NE(e.find("conv.jsonl:1: key 'prompt' holds chat messages"), std::string::npos) << e;
}

}  // namespace completions_test
}  // namespace ftune::data
