// Model directories: single file, sharded index round trip and its errors, refused pickles.
#include "io/checkpoint_reader.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "io/json_file.h"
#include "io_test_helpers.h"
#include "test_util.h"

namespace ftune::io {
namespace {

using nlohmann::json;
using test::expect_input_error;
using test::TempDir;

class Checkpoint : public ::testing::Test {
 protected:
  Checkpoint() : rng_(test::test_seed()) {
    for (const char* name :
         {"embeddings.weight", "layer.0.weight", "layer.0.bias", "classifier.weight"})
      tensors_.emplace(name, test::random_tensor(Shape{4, 3}, rng_));
  }
  SafetensorsTensor entry(const std::string& name) {
    return {name, tensors_.at(name).view(), std::nullopt};
  }

  // Two shards and the index transformers writes for them.
  void write_sharded(const std::string& dir) {
    write_safetensors(dir + "/model-00001-of-00002.safetensors",
                      {entry("embeddings.weight"), entry("layer.0.weight")});
    write_safetensors(dir + "/model-00002-of-00002.safetensors",
                      {entry("layer.0.bias"), entry("classifier.weight")});
    write_json_atomic(dir + "/model.safetensors.index.json", index_json());
  }
  json index_json() {
    return {{"metadata", {{"total_size", 4 * 4 * 12}}},
            {"weight_map",
             {{"embeddings.weight", "model-00001-of-00002.safetensors"},
              {"layer.0.weight", "model-00001-of-00002.safetensors"},
              {"layer.0.bias", "model-00002-of-00002.safetensors"},
              {"classifier.weight", "model-00002-of-00002.safetensors"}}}};
  }
  void expect_all_tensors(const CheckpointReader& r) {
    ASSERT_EQ(r.names(), (std::vector<std::string>{"classifier.weight", "embeddings.weight",
                                                   "layer.0.bias", "layer.0.weight"}));
    for (const auto& [name, t] : tensors_) {
      HostTensor got(DType::F32, Shape{4, 3});
      r.read_into(name, got.view());
      EXPECT_EQ(test::to_vector(got.view()), test::to_vector(t.view())) << name;
      EXPECT_EQ(r.at(name).shape, (std::vector<int64_t>{4, 3}));
      ASSERT_NE(r.find(name), nullptr);
    }
    EXPECT_EQ(r.find("missing"), nullptr);
    expect_input_error([&] { r.at("missing"); }, {r.weights_path(), "'missing'"});
  }

  std::mt19937_64 rng_;
  std::map<std::string, HostTensor> tensors_;
  TempDir dir_;
};

TEST_F(Checkpoint, SingleFile) {
  std::vector<SafetensorsTensor> all;
  for (const auto& [name, t] : tensors_) all.push_back(entry(name));
  write_safetensors(dir_.path() + "/model.safetensors", all);
  const CheckpointReader r = CheckpointReader::open(dir_.path());
  EXPECT_FALSE(r.sharded());
  EXPECT_EQ(r.weights_path(), dir_.path() + "/model.safetensors");
  EXPECT_EQ(r.file_of("layer.0.bias"), dir_.path() + "/model.safetensors");
  EXPECT_EQ(r.metadata().at("format"), "pt");
  expect_all_tensors(r);
  // A file path works as well as its directory.
  expect_all_tensors(CheckpointReader::open(dir_.path() + "/model.safetensors"));
  const HostTensor bf = r.read("layer.0.bias", DType::BF16);
  EXPECT_EQ(bf.view().dtype, DType::BF16);
}

TEST_F(Checkpoint, ShardedRoundTrip) {
  write_sharded(dir_.path());
  const CheckpointReader r = CheckpointReader::open(dir_.path());
  EXPECT_TRUE(r.sharded());
  EXPECT_EQ(r.weights_path(), dir_.path() + "/model.safetensors.index.json");
  EXPECT_EQ(r.shard_paths().size(), 2u);
  EXPECT_EQ(r.file_of("classifier.weight"), dir_.path() + "/model-00002-of-00002.safetensors");
  EXPECT_EQ(r.file_of("embeddings.weight"), dir_.path() + "/model-00001-of-00002.safetensors");
  expect_all_tensors(r);
  expect_all_tensors(CheckpointReader::open(dir_.path() + "/model.safetensors.index.json"));
}

TEST_F(Checkpoint, SingleFileWinsOverIndexLikeTransformers) {
  write_sharded(dir_.path());
  write_safetensors(dir_.path() + "/model.safetensors", {entry("layer.0.bias")});
  const CheckpointReader r = CheckpointReader::open(dir_.path());
  EXPECT_FALSE(r.sharded());
  EXPECT_EQ(r.names(), std::vector<std::string>{"layer.0.bias"});
}

TEST_F(Checkpoint, MissingShard) {
  write_sharded(dir_.path());
  std::filesystem::remove(dir_.path() + "/model-00002-of-00002.safetensors");
  expect_input_error([&] { CheckpointReader::open(dir_.path()); },
                     {"model.safetensors.index.json", "model-00002-of-00002.safetensors",
                      "does not exist", "'classifier.weight'"});
}

TEST_F(Checkpoint, TensorMappedToShardThatLacksIt) {
  write_sharded(dir_.path());
  json index = index_json();
  index["weight_map"]["layer.0.bias"] = "model-00001-of-00002.safetensors";
  write_json_atomic(dir_.path() + "/model.safetensors.index.json", index);
  expect_input_error([&] { CheckpointReader::open(dir_.path()); },
                     {"model.safetensors.index.json", "'layer.0.bias'",
                      "model-00001-of-00002.safetensors", "does not contain it"});
}

TEST_F(Checkpoint, InvalidIndexJson) {
  write_sharded(dir_.path());
  const std::string index = dir_.path() + "/model.safetensors.index.json";
  test::write_bytes(index, "{\n  \"weight_map\": {\n    \"a\": \"x.safetensors\",\n  }\n}\n");
  expect_input_error([&] { CheckpointReader::open(dir_.path()); }, {index + ":4:3: invalid JSON"});
  test::write_bytes(index, R"({"metadata": {}})");
  expect_input_error([&] { CheckpointReader::open(dir_.path()); },
                     {index, "'weight_map'", "nothing"});
  test::write_bytes(index, R"({"weight_map": []})");
  expect_input_error([&] { CheckpointReader::open(dir_.path()); },
                     {index, "'weight_map'", "array"});
  test::write_bytes(index, R"({"weight_map": {}})");
  expect_input_error([&] { CheckpointReader::open(dir_.path()); }, {index, "no tensors"});
  test::write_bytes(index, R"({"weight_map": {"a": 3}})");
  expect_input_error([&] { CheckpointReader::open(dir_.path()); }, {index, "'a'", "integer"});
  test::write_bytes(index, R"({"weight_map": {"a": "../model-00001-of-00002.safetensors"}})");
  expect_input_error([&] { CheckpointReader::open(dir_.path()); },
                     {index, "'a'", "not a file inside"});
  test::write_bytes(index, R"(["weight_map"])");
  expect_input_error([&] { CheckpointReader::open(dir_.path()); }, {index, "JSON object"});
}

TEST_F(Checkpoint, CorruptShardIsNamed) {
  write_sharded(dir_.path());
  const std::string shard = dir_.path() + "/model-00002-of-00002.safetensors";
  test::write_bytes(shard, test::read_bytes(shard).substr(0, 100));
  expect_input_error([&] { CheckpointReader::open(dir_.path()); }, {shard});
}

TEST_F(Checkpoint, PickleCheckpointsAreRefusedWithAConversionCommand) {
  test::write_bytes(dir_.path() + "/pytorch_model.bin", "PK\x03\x04 not really");
  test::write_bytes(dir_.path() + "/config.json", "{}");
  const std::string msg =
      expect_input_error([&] { CheckpointReader::open(dir_.path()); },
                         {dir_.path(), "pytorch_model.bin", "pickle", "safetensors", "save_file",
                          "safe_serialization=True"});
  TempDir sharded;
  test::write_bytes(sharded.path() + "/pytorch_model-00001-of-00002.bin", "x");
  test::write_bytes(sharded.path() + "/pytorch_model-00002-of-00002.bin", "x");
  test::write_bytes(sharded.path() + "/pytorch_model.bin.index.json", "{}");
  expect_input_error(
      [&] { CheckpointReader::open(sharded.path()); },
      {"pytorch_model-00001-of-00002.bin", "pytorch_model.bin.index.json", "save_pretrained"});
}

TEST_F(Checkpoint, MissingDirectoryOrWeights) {
  expect_input_error([&] { CheckpointReader::open(dir_.path() + "/nope"); },
                     {dir_.path() + "/nope", "does not exist"});
  expect_input_error(
      [&] { CheckpointReader::open(dir_.path()); },
      {"no model weights in " + dir_.path(), "model.safetensors", "model.safetensors.index.json"});
  test::write_bytes(dir_.path() + "/adapter_model.safetensors", "x");
  expect_input_error([&] { CheckpointReader::open(dir_.path()); }, {"adapter_model.safetensors"});
  test::write_bytes(dir_.path() + "/config.json", "{}");
  expect_input_error([&] { CheckpointReader::open(dir_.path() + "/config.json"); },
                     {"config.json", "is a file"});
}

}  // namespace
}  // namespace ftune::io
