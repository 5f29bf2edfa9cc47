// JSON files: line:column parse errors, typed getters' messages, Python-compatible writing.
#include "io/json_file.h"

#include <gtest/gtest.h>

#include "io/atomic_file.h"
#include "io_test_helpers.h"
#include "test_util.h"

namespace ftune::io {
namespace {

using nlohmann::json;
using test::expect_input_error;

TEST(JsonFile, ParseErrorNamesFileLineAndColumn) {
  // The second ',' on line 2 is the offending character: line 2, column 4.
  const std::string msg = expect_input_error([] { parse_json("[1,\n 2,,]", "cfg.json"); },
                                             {"cfg.json:2:4: invalid JSON"});
  EXPECT_EQ(msg.find("[json.exception"), std::string::npos) << msg;
  expect_input_error([] { parse_json("{\"a\": 1", "x.json"); }, {"x.json:1:8: invalid JSON"});
  expect_input_error([] { parse_json("", "empty.json"); }, {"empty.json:1:1: invalid JSON"});
  expect_input_error([] { parse_json("{\n  \"a\": tru\n}", "c.json"); }, {"c.json:2:"});
  expect_input_error([] { parse_json("\"\xff\"", "u.json"); }, {"u.json:1:"});
}

TEST(JsonFile, ReadsFilesAndNamesMissingOnes) {
  test::TempDir dir;
  const std::string path = dir.path() + "/config.json";
  test::write_bytes(path, "{\"hidden_size\": 768}");
  EXPECT_EQ(read_json_file(path).at("hidden_size"), 768);
  expect_input_error([&] { read_json_file(dir.path() + "/nope.json"); },
                     {dir.path() + "/nope.json"});
  test::write_bytes(path, "{\"hidden_size\": 768,}");
  expect_input_error([&] { read_json_file(path); }, {path + ":1:"});
}

TEST(JsonFile, TypedGetters) {
  const json j = json::parse(R"({"hidden_size": 768, "eps": 1e-12, "act": "gelu", "tie": true,
                                 "drop": null, "s": "768", "f": 0.5, "big": 18446744073709551615,
                                 "neg": -3, "one": 1, "arr": [1]})");
  const std::string p = "config.json";
  EXPECT_EQ(get_int(j, "hidden_size", p), 768);
  EXPECT_EQ(get_int(j, "neg", p), -3);
  EXPECT_DOUBLE_EQ(get_float(j, "eps", p), 1e-12);
  EXPECT_DOUBLE_EQ(get_float(j, "one", p), 1.0);  // integers are numbers too
  EXPECT_EQ(get_string(j, "act", p), "gelu");
  EXPECT_TRUE(get_bool(j, "tie", p));

  EXPECT_EQ(expect_input_error([&] { get_int(j, "s", p); }, {}),
            "config.json: key 's' must be an integer, got string \"768\"");
  EXPECT_EQ(expect_input_error([&] { get_int(j, "f", p); }, {}),
            "config.json: key 'f' must be an integer, got float 0.5");
  EXPECT_EQ(expect_input_error([&] { get_int(j, "missing", p); }, {}),
            "config.json: missing required key 'missing' (an integer)");
  EXPECT_EQ(expect_input_error([&] { get_int(j, "drop", p); }, {}),
            "config.json: key 'drop' must be an integer, got null");
  expect_input_error([&] { get_int(j, "big", p); }, {"'big'", "64-bit"});
  expect_input_error([&] { get_float(j, "act", p); }, {"'act'", "a number", "string"});
  expect_input_error([&] { get_string(j, "hidden_size", p); },
                     {"'hidden_size'", "a string", "integer 768"});
  expect_input_error([&] { get_bool(j, "one", p); }, {"'one'", "true or false", "integer"});
  expect_input_error([&] { get_string(j, "arr", p); }, {"got array"});
  expect_input_error([&] { get_int(json::array(), "x", p); },
                     {"config.json", "expected a JSON object"});

  EXPECT_EQ(get_optional_int(j, "missing", p), std::nullopt);
  EXPECT_EQ(get_optional_float(j, "drop", p), std::nullopt);  // null counts as absent
  EXPECT_EQ(get_optional_int(j, "hidden_size", p), 768);
  EXPECT_EQ(get_optional_string(j, "act", p), "gelu");
  EXPECT_EQ(get_optional_bool(j, "tie", p), true);
  expect_input_error([&] { get_optional_bool(j, "act", p); }, {"'act'", "true or false"});
}

TEST(JsonFile, WritesLikePythonJsonDumpsIndent2) {
  test::TempDir dir;
  const std::string path = dir.path() + "/config.json";
  const json j = json::parse(R"({"g": [], "b": {"c": "é"}, "a": [1, 2], "d": 0.1, "e": true,
                                 "f": null, "h": 1e-12, "i": {}})");
  write_json_atomic(path, j);
  // python3 -c 'import json; print(json.dumps(obj, indent=2, sort_keys=True))'
  EXPECT_EQ(read_file(path),
            "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {\n    \"c\": \"\\u00e9\"\n  },\n"
            "  \"d\": 0.1,\n  \"e\": true,\n  \"f\": null,\n  \"g\": [],\n  \"h\": 1e-12,\n"
            "  \"i\": {}\n}\n");
  EXPECT_EQ(read_json_file(path), j);
  expect_input_error([&] { write_json_atomic(path, json("\xff")); }, {path});
}

}  // namespace
}  // namespace ftune::io
