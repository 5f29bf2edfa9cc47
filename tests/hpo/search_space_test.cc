// Search space parsing: every kind of parameter, conditions, canonical JSON, and the InputErrors
// for invalid spaces (each naming the parameter and key).
#include <gtest/gtest.h>

#include "core/error.h"
#include "hpo/search_space.h"

namespace ftune::hpo {
namespace {

SearchSpace parse(const std::string& yaml) {
  return SearchSpace::parse(YAML::Load(yaml), "space");
}

std::string error_of(const std::string& yaml) {
  try {
    parse(yaml);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

const char* kSpace = R"(
training.learning_rate: {type: float, low: 1.0e-5, high: 1.0e-3, log: true}
training.batch_size: {type: int, low: 8, high: 64, step: 8}
training.dropout: {type: float, low: 0.0, high: 0.3, step: 0.1}
peft: {type: categorical, choices: [none, lora]}
lora_rank: {type: int, low: 4, high: 64, log: true, when: {peft: lora}}
)";

TEST(SearchSpace, ParsesEveryKindAndOrdersParentsFirst) {
  const SearchSpace s = parse(kSpace);
  ASSERT_EQ(s.params().size(), 5u);
  std::vector<std::string> names;
  for (const auto& p : s.params()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"peft", "lora_rank", "training.batch_size",
                                             "training.dropout", "training.learning_rate"}));
  const ParamSpec* lr = s.find("training.learning_rate");
  ASSERT_TRUE(lr);
  EXPECT_TRUE(lr->dist.log);
  EXPECT_EQ(lr->dist.kind, Distribution::Kind::Float);
  EXPECT_EQ(s.find("training.batch_size")->dist.step, 8);
  EXPECT_EQ(s.find("lora_rank")->dist.step, 1);
  EXPECT_EQ(s.find("peft")->dist.choices, (std::vector<std::string>{"none", "lora"}));
}

TEST(SearchSpace, ConditionsAndExternalValues) {
  const SearchSpace s = parse(kSpace);
  const ParamSpec& rank = *s.find("lora_rank");
  EXPECT_FALSE(s.active(rank, {}));
  EXPECT_FALSE(s.active(rank, {{"peft", 0}}));
  EXPECT_TRUE(s.active(rank, {{"peft", 1}}));
  EXPECT_EQ(s.external("peft", 1), "lora");
  EXPECT_EQ(s.external("training.learning_rate", 3e-5), "3e-05");
  EXPECT_EQ(s.external("training.batch_size", 32), "32");
  EXPECT_EQ(s.internal("peft", "lora"), 1);
  EXPECT_EQ(s.internal("training.batch_size", "32"), 32);
  EXPECT_THROW(s.internal("training.batch_size", "33"), InputError);
  EXPECT_THROW(s.internal("peft", "dora"), InputError);
}

TEST(SearchSpace, CanonicalJsonIgnoresOrderAndRoundTrips) {
  const SearchSpace a = parse(kSpace);
  const SearchSpace b = parse(R"(
peft: {type: categorical, choices: [none, lora]}
lora_rank: {when: {peft: lora}, type: int, low: 4, high: 64, log: true}
training.dropout: {type: float, low: 0.0, high: 0.3, step: 0.1}
training.batch_size: {type: int, low: 8, high: 64, step: 8}
training.learning_rate: {type: float, low: 1.0e-5, high: 1.0e-3, log: true}
)");
  EXPECT_EQ(a.to_json(), b.to_json());
  const SearchSpace c = SearchSpace::from_json(a.to_json(), "stored");
  EXPECT_EQ(c.to_json(), a.to_json());
  EXPECT_EQ(c.params().size(), a.params().size());
  EXPECT_NE(a.to_json(), parse("x: {type: float, low: 0, high: 1}").to_json());
}

TEST(SearchSpace, SteppedRangesEndOnTheGridLikeOptuna) {
  const SearchSpace s = parse(
      "a: {type: int, low: 1, high: 10, step: 4}\nb: {type: float, low: 0, high: 1, step: 0.3}");
  EXPECT_EQ(s.find("a")->dist.high, 9);
  EXPECT_NEAR(s.find("b")->dist.high, 0.9, 1e-12);
  EXPECT_EQ(s.external("b", 0.1 + 0.2), "0.3");  // the grid value, without binary noise
  EXPECT_EQ(s.internal("b", "0.3"), 0.3);
}

TEST(SearchSpace, InvalidSpacesNameParameterAndKey) {
  EXPECT_NE(error_of("x: {type: float, low: 2, high: 1}").find("space.x.low"), std::string::npos);
  EXPECT_NE(error_of("x: {type: float, low: 0, high: 1, log: true}").find("space.x.low"),
            std::string::npos);
  EXPECT_NE(
      error_of("x: {type: float, low: 1, high: 2, log: true, step: 0.1}").find("space.x.step"),
      std::string::npos);
  EXPECT_NE(error_of("x: {type: categorical, choices: []}").find("space.x.choices"),
            std::string::npos);
  EXPECT_NE(error_of("x: {type: categorical, choices: [a, a]}").find("space.x.choices"),
            std::string::npos);
  EXPECT_NE(error_of("x: {type: float, low: 0, high: 1, when: {y: a}}").find("space.x.when.y"),
            std::string::npos);
  EXPECT_NE(
      error_of(
          "y: {type: categorical, choices: [a]}\nx: {type: float, low: 0, high: 1, when: {y: b}}")
          .find("space.x.when.y"),
      std::string::npos);
  EXPECT_NE(error_of("x: {type: float, low: 0, high: 1, hgih: 2}").find("space.x.hgih"),
            std::string::npos);
  EXPECT_NE(error_of("x: {type: real, low: 0, high: 1}").find("space.x.type"), std::string::npos);
  EXPECT_NE(error_of("x: {type: int, low: 0.5, high: 1}").find("space.x.low"), std::string::npos);
  EXPECT_NE(error_of("x: {type: float, high: 1}").find("space.x.low"), std::string::npos);
  EXPECT_NE(error_of("x: {type: categorical, choices: [a], low: 1}").find("space.x.low"),
            std::string::npos);
  EXPECT_NE(error_of("a: {type: categorical, choices: [p, q], when: {b: p}}\n"
                     "b: {type: categorical, choices: [p, q], when: {a: p}}")
                .find("cycle"),
            std::string::npos);
  EXPECT_NE(error_of("[1, 2]").find("space"), std::string::npos);
}

}  // namespace
}  // namespace ftune::hpo
