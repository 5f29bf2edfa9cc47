// Corrupt and hostile safetensors files: each defect raises InputError naming the file and the
// culprit; random truncations and byte flips never crash (run under ASan/UBSan to be sure).
#include <gtest/gtest.h>

#include <random>

#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io_test_helpers.h"
#include "test_util.h"

namespace ftune::io {
namespace {

using test::expect_input_error;
using test::safetensors_bytes;
using test::TempDir;

class SafetensorsCorrupt : public ::testing::Test {
 protected:
  // Writes the bytes to a file and expects open() to fail with every fragment (and the path).
  std::string expect_open_error(const std::string& bytes,
                                std::initializer_list<std::string> fragments) {
    test::write_bytes(path_, bytes);
    std::vector<std::string> all(fragments);
    all.push_back(path_);
    std::string msg;
    try {
      SafetensorsFile::open(path_);
      ADD_FAILURE() << "open() accepted a corrupt file";
    } catch (const InputError& e) {
      msg = e.what();
      for (const std::string& f : all)
        EXPECT_NE(msg.find(f), std::string::npos) << "message lacks \"" << f << "\": " << msg;
    }
    return msg;
  }
  std::string expect_header_error(const std::string& header, const std::string& data,
                                  std::initializer_list<std::string> fragments) {
    return expect_open_error(safetensors_bytes(header, data), fragments);
  }

  TempDir dir_;
  std::string path_ = dir_.path() + "/corrupt.safetensors";
};

const std::string kData24(24, '\0');

TEST_F(SafetensorsCorrupt, FileShorterThanTheLengthField) {
  expect_open_error("", {"0 bytes", "at least 8"});
  expect_open_error("abcde", {"5 bytes", "at least 8"});
}

TEST_F(SafetensorsCorrupt, TruncatedHeader) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";
  expect_open_error(safetensors_bytes(header, "").substr(0, 30),
                    {"header length 57", "22 bytes", "truncated"});
}

TEST_F(SafetensorsCorrupt, AbsurdHeaderLength) {
  expect_open_error(safetensors_bytes("{}", "", uint64_t{1} << 60),
                    {"1152921504606846976", "limit"});
  expect_open_error(safetensors_bytes("{}", "", UINT64_MAX - 1), {"limit"});
}

TEST_F(SafetensorsCorrupt, InvalidJson) {
  expect_header_error(R"({"w":{"dtype":"F32",)", "", {"not valid JSON"});
  expect_header_error("", "", {"not valid JSON"});
  expect_header_error("{\"w\xff\":1}", "", {"not valid JSON"});
  expect_header_error(R"({} trailing)", "", {"not valid JSON"});
}

TEST_F(SafetensorsCorrupt, HeaderAndEntriesMustBeObjects) {
  expect_header_error("[1, 2]", "", {"must be a JSON object", "[1,2]"});
  expect_header_error(R"({"w": 5})", "", {"\"w\"", "expected an object", "5"});
  expect_header_error(R"({"w": [[[[[]]]]]})", "", {"\"w\"", "array of 1 elements"});
}

TEST_F(SafetensorsCorrupt, UnknownOrMissingDtype) {
  expect_header_error(R"({"w":{"dtype":"F33","shape":[2,3],"data_offsets":[0,24]}})", kData24,
                      {"\"w\"", "unknown dtype \"F33\"", "BF16"});
  expect_header_error(R"({"w":{"dtype":"f32","shape":[2,3],"data_offsets":[0,24]}})", kData24,
                      {"\"w\"", "\"f32\""});
  expect_header_error(R"({"w":{"shape":[2,3],"data_offsets":[0,24]}})", kData24,
                      {"\"w\"", "'dtype'", "nothing"});
  expect_header_error(R"({"w":{"dtype":4,"shape":[2,3],"data_offsets":[0,24]}})", kData24,
                      {"\"w\"", "'dtype'"});
}

TEST_F(SafetensorsCorrupt, BadShapes) {
  expect_header_error(R"({"w":{"dtype":"F32","data_offsets":[0,24]}})", kData24,
                      {"\"w\"", "'shape'"});
  expect_header_error(R"({"w":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,24]}})", kData24,
                      {"\"w\"", "non-negative", "[2,-3]"});
  expect_header_error(R"({"w":{"dtype":"F32","shape":[2,3.0],"data_offsets":[0,24]}})", kData24,
                      {"\"w\"", "'shape'"});
  expect_header_error(R"({"w":{"dtype":"F32","shape":"2x3","data_offsets":[0,24]}})", kData24,
                      {"\"w\"", "'shape'"});
  // Products that overflow 64 bits must not wrap around to a small size.
  expect_header_error(
      R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,0]}})", "",
      {"\"w\"", "[4294967296, 4294967296, 2]", "multiply past 2^63"});
  expect_header_error(R"({"w":{"dtype":"F64","shape":[1152921504606846976],"data_offsets":[0,0]}})",
                      "", {"\"w\"", "more bytes than any file holds"});
  // Found by fuzz_safetensors: an empty tensor (a zero dimension) whose other dimensions multiply
  // past 2^63 opened, and its strides overflowed int64 (UBSan) when it was read.
  expect_header_error(
      R"({"w":{"dtype":"F32","shape":[0,4611686018427387904,4],"data_offsets":[0,0]}})", "",
      {"\"w\"", "[0, 4611686018427387904, 4]", "multiply past 2^63"});
  expect_header_error(
      R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,0]}})", "",
      {"\"w\""});
}

TEST_F(SafetensorsCorrupt, ShapeAndSizeDisagree) {
  expect_header_error(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", kData24,
                      {"\"w\"", "F32", "(2, 3)", "needs 24 bytes", "hold 20 bytes"});
  expect_header_error(R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,24]}})", kData24,
                      {"\"w\"", "needs 12 bytes"});
  expect_header_error(R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", kData24,
                      {"\"w\"", "12 bits, not a whole number of bytes"});
}

TEST_F(SafetensorsCorrupt, BadOffsets) {
  expect_header_error(R"({"w":{"dtype":"F32","shape":[2,3]}})", kData24,
                      {"\"w\"", "'data_offsets'"});
  expect_header_error(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24,48]}})", kData24,
                      {"\"w\"", "'data_offsets'"});
  expect_header_error(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[-24,0]}})", kData24,
                      {"\"w\"", "'data_offsets'"});
  expect_header_error(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}})", kData24,
                      {"\"w\"", "[8, 4]", "begin after"});
  expect_header_error(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})",
                      std::string(8, '\0'),
                      {"\"w\"", "[0, 24]", "outside the data buffer of 8 bytes"});
  expect_header_error(
      R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,0]}})", kData24,
      {"\"w\"", "begin after"});
}

TEST_F(SafetensorsCorrupt, OverlappingTensors) {
  expect_header_error(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                      R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                      kData24, {"\"a\"", "\"b\"", "overlap"});
  expect_header_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})",
                      kData24, {"\"a\"", "\"b\"", "overlap"});
  // Zero-size tensors hold no bytes and may sit anywhere; adjacent tensors are fine.
  test::write_bytes(path_,
                    safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                      R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})",
                                      kData24));
  EXPECT_EQ(SafetensorsFile::open(path_).entries().size(), 3u);
}

TEST_F(SafetensorsCorrupt, DuplicateNames) {
  expect_header_error(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                      R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                      kData24, {"\"w\"", "appears twice"});
  expect_header_error(R"({"w":{"dtype":"U8","dtype":"F32","shape":[1],"data_offsets":[0,1]}})",
                      kData24, {"\"dtype\"", "\"w\"", "twice"});
}

TEST_F(SafetensorsCorrupt, BadMetadata) {
  expect_header_error(R"({"__metadata__":{"format":1}})", "",
                      {"__metadata__", "\"format\"", "string"});
  expect_header_error(R"({"__metadata__":["pt"]})", "", {"__metadata__", "object of strings"});
  test::write_bytes(path_, safetensors_bytes(R"({"__metadata__":null})", ""));
  EXPECT_TRUE(SafetensorsFile::open(path_).metadata().empty());
}

TEST_F(SafetensorsCorrupt, NotAFile) {
  expect_input_error([&] { SafetensorsFile::open(dir_.path() + "/missing.safetensors"); },
                     {dir_.path() + "/missing.safetensors", "No such file"});
  expect_input_error([&] { SafetensorsFile::open(dir_.path()); }, {dir_.path(), "is a directory"});
}

// Opens whatever bytes are on disk; success is allowed, but then every readable tensor must read.
void open_and_read_all(const std::string& path) {
  try {
    const SafetensorsFile f = SafetensorsFile::open(path);
    for (const SafetensorsEntry& e : f.entries()) {
      if (e.shape.size() > static_cast<size_t>(kMaxRank) || e.numel() > (1 << 20)) continue;
      const auto d = ftune_dtype(e.dtype);
      if (!d) continue;
      HostTensor t = f.read(e.name);
      if (*d == DType::BF16 || *d == DType::F16) f.read(e.name, DType::F32);
    }
  } catch (const InputError&) {
    // expected for most mutations
  }
}

std::string valid_file(const std::string& dir) {
  const std::string path = dir + "/valid.safetensors";
  std::mt19937_64 rng(7);
  HostTensor w = test::random_tensor(Shape{3, 4}, rng);
  HostTensor ids(DType::I64, Shape{2});
  fill_zero(ids.view());
  write_safetensors(path,
                    {{"w", w.view(), std::nullopt},
                     {"w.bf16", w.view(), DType::BF16},
                     {"ids", ids.view(), std::nullopt},
                     {"empty", w.view().slice0(0, 0), std::nullopt}},
                    {{"k", "v"}});
  return read_file(path);
}

TEST_F(SafetensorsCorrupt, EveryTruncationFailsCleanly) {
  const std::string bytes = valid_file(dir_.path());
  for (size_t len = 0; len < bytes.size(); ++len) {
    test::write_bytes(path_, bytes.substr(0, len));
    EXPECT_THROW(SafetensorsFile::open(path_), InputError) << "truncated to " << len << " bytes";
  }
  test::write_bytes(path_, bytes);
  EXPECT_NO_THROW(open_and_read_all(path_));
}

TEST_F(SafetensorsCorrupt, RandomHeaderByteFlipsNeverCrash) {
  SCOPED_TRACE(test::test_seed());
  std::mt19937_64 rng(test::test_seed());
  const std::string bytes = valid_file(dir_.path());
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const char interesting[] = "{}[]\":,0123456789-e. xFIUB\\";
  for (int iter = 0; iter < 1000; ++iter) {
    std::string mutated = bytes;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) {
      const size_t pos = rng() % (8 + n);
      switch (rng() % 3) {
        case 0:
          mutated[pos] = static_cast<char>(rng());
          break;
        case 1:
          mutated[pos] = static_cast<char>(mutated[pos] ^ (1 << (rng() % 8)));
          break;
        default:
          mutated[pos] = interesting[rng() % (sizeof(interesting) - 1)];
          break;
      }
    }
    test::write_bytes(path_, mutated);
    open_and_read_all(path_);
  }
}

}  // namespace
}  // namespace ftune::io
