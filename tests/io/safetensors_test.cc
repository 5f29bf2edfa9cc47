// safetensors: round trips for every dtype, bf16/f16 conversion on write and read, byte-exact
// equality with files written by the Python reference library, and the committed fixtures.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io_test_helpers.h"
#include "test_util.h"

namespace ftune::io {
namespace {

using test::expect_input_error;
using test::TempDir;

std::string fixture(const std::string& name) {
  return test::fixtures_dir() + "/io/" + name;
}

// A tensor of random bytes in every dtype, random floats where bytes could make NaN.
HostTensor random_of(DType dtype, Shape shape, std::mt19937_64& rng) {
  HostTensor t(dtype, shape);
  if (dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16) {
    HostTensor f = test::random_tensor(shape, rng, -100.0f, 100.0f);
    convert(t.view(), f.view());
  } else {
    auto* p = static_cast<unsigned char*>(t.view().data);
    for (size_t i = 0; i < t.view().nbytes(); ++i) p[i] = static_cast<unsigned char>(rng());
  }
  return t;
}

bool same_bytes(TensorView a, TensorView b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data, b.data, a.nbytes()) == 0;
}

TEST(Safetensors, RoundTripsEveryDtype) {
  SCOPED_TRACE(test::test_seed());
  std::mt19937_64 rng(test::test_seed());
  TempDir dir;
  const std::string path = dir.path() + "/all.safetensors";
  const DType dtypes[] = {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8};
  std::vector<HostTensor> held;
  std::vector<SafetensorsTensor> tensors;
  for (DType d : dtypes) {
    held.push_back(random_of(d, Shape{3, 5, 2}, rng));
    tensors.push_back({"t." + std::string(dtype_name(d)), held.back().view(), std::nullopt});
  }
  write_safetensors(path, tensors);
  const SafetensorsFile f = SafetensorsFile::open(path);
  ASSERT_EQ(f.entries().size(), 6u);
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsEntry& e = f.at(tensors[i].name);
    EXPECT_EQ(ftune_dtype(e.dtype), dtypes[i]);
    EXPECT_EQ(e.shape, (std::vector<int64_t>{3, 5, 2}));
    HostTensor back = f.read(tensors[i].name);
    EXPECT_TRUE(same_bytes(back.view(), held[i].view())) << tensors[i].name;
    HostTensor poisoned(dtypes[i], Shape{3, 5, 2});
    std::memset(poisoned.view().data, 0xab, poisoned.view().nbytes());
    f.read_into(tensors[i].name, poisoned.view());
    EXPECT_TRUE(same_bytes(poisoned.view(), held[i].view())) << tensors[i].name;
  }
}

TEST(Safetensors, StoresF32AsBf16AndF16WithNearestEven) {
  SCOPED_TRACE(test::test_seed());
  std::mt19937_64 rng(test::test_seed());
  TempDir dir;
  const std::string path = dir.path() + "/half.safetensors";
  // More elements than one conversion chunk, so chunk boundaries are exercised.
  HostTensor w = test::random_tensor(Shape{70001}, rng, -3.0f, 3.0f);
  write_safetensors(path, {{"w_bf16", w.view(), DType::BF16},
                           {"w_f16", w.view(), DType::F16},
                           {"w", w.view(), std::nullopt}});
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.at("w_bf16").dtype, SafetensorsDtype::BF16);
  EXPECT_EQ(f.at("w_f16").dtype, SafetensorsDtype::F16);
  EXPECT_EQ(f.at("w_bf16").nbytes(), 70001u * 2);

  const HostTensor as_f32 = f.read("w_bf16", DType::F32);
  const HostTensor as_bf16 = f.read("w_bf16");
  const HostTensor f16_as_f32 = f.read("w_f16", DType::F32);
  const HostTensor f16_as_bf16 = f.read("w_f16", DType::BF16);
  const HostTensor f32_as_f16 = f.read("w", DType::F16);
  for (int64_t i = 0; i < w.numel(); ++i) {
    const float x = w.data<float>()[i];
    const bf16_t b = float_to_bf16(x);
    const f16_t h = float_to_f16(x);
    ASSERT_EQ(as_bf16.data<bf16_t>()[i].bits, b.bits) << i;
    ASSERT_EQ(float_bits(as_f32.data<float>()[i]), float_bits(bf16_to_float(b))) << i;
    ASSERT_EQ(float_bits(f16_as_f32.data<float>()[i]), float_bits(f16_to_float(h))) << i;
    ASSERT_EQ(f16_as_bf16.data<bf16_t>()[i].bits, float_to_bf16(f16_to_float(h)).bits) << i;
    ASSERT_EQ(f32_as_f16.data<f16_t>()[i].bits, h.bits) << i;
  }
  // bf16 in memory stored as f32 widens exactly.
  const std::string path2 = dir.path() + "/wide.safetensors";
  write_safetensors(path2, {{"x", as_bf16.view(), DType::F32}});
  EXPECT_TRUE(same_bytes(SafetensorsFile::open(path2).read("x").view(), as_f32.view()));
}

TEST(Safetensors, ReadIntoChecksShapeAndDtype) {
  TempDir dir;
  const std::string path = dir.path() + "/w.safetensors";
  HostTensor w(DType::F32, Shape{2, 3});
  HostTensor ids(DType::I64, Shape{4});
  fill(w.view(), 1.0f);
  fill_zero(ids.view());
  write_safetensors(path,
                    {{"encoder.w", w.view(), std::nullopt}, {"ids", ids.view(), std::nullopt}});
  const SafetensorsFile f = SafetensorsFile::open(path);
  HostTensor wrong(DType::F32, Shape{3, 2});
  EXPECT_EQ(expect_input_error([&] { f.read_into("encoder.w", wrong.view()); }, {}),
            "tensor \"encoder.w\" in " + path + " has shape (2, 3), expected (3, 2)");
  HostTensor rank(DType::F32, Shape{6});
  expect_input_error([&] { f.read_into("encoder.w", rank.view()); }, {"(2, 3)", "(6,)"});
  HostTensor as_float(DType::F32, Shape{4});
  expect_input_error([&] { f.read_into("ids", as_float.view()); }, {"\"ids\"", path, "I64", "f32"});
  HostTensor as_i32(DType::I32, Shape{4});
  expect_input_error([&] { f.read_into("ids", as_i32.view()); }, {"I64", "i32"});
  expect_input_error([&] { f.read_into("nope", as_i32.view()); }, {path, "\"nope\""});
  EXPECT_EQ(f.find("nope"), nullptr);
  ASSERT_NE(f.find("ids"), nullptr);
}

TEST(Safetensors, EmptyFilesZeroSizeTensorsAndScalars) {
  TempDir dir;
  const std::string path = dir.path() + "/empty.safetensors";
  write_safetensors(path, {});
  EXPECT_EQ(read_file(path).substr(8, 32), "{\"__metadata__\":{\"format\":\"pt\"}}");
  EXPECT_TRUE(SafetensorsFile::open(path).entries().empty());

  // The smallest valid file: an empty header object.
  test::write_bytes(path, test::safetensors_bytes("{}", ""));
  const SafetensorsFile bare = SafetensorsFile::open(path);
  EXPECT_TRUE(bare.entries().empty());
  EXPECT_TRUE(bare.metadata().empty());

  HostTensor none(DType::BF16, Shape{0, 4});
  HostTensor scalar(DType::F32, Shape{});
  fill(scalar.view(), -2.5f);
  write_safetensors(path, {{"none", none.view(), std::nullopt},
                           {"none_f32", TensorView(nullptr, DType::F32, Device::cpu(), Shape{4, 0}),
                            std::nullopt},
                           {"scalar", scalar.view(), DType::F16}});
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.at("none").shape, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(f.at("none").nbytes(), 0u);
  EXPECT_EQ(f.read("none", DType::F32).numel(), 0);
  EXPECT_EQ(f.at("scalar").shape, std::vector<int64_t>{});
  EXPECT_EQ(f.at("scalar").shape_str(), "()");
  EXPECT_EQ(f.read("scalar", DType::F32).data<float>()[0], -2.5f);
}

TEST(Safetensors, MetadataAndLayoutFollowTheReferenceWriter) {
  TempDir dir;
  const std::string path = dir.path() + "/meta.safetensors";
  HostTensor a(DType::F32, Shape{3}), b(DType::I64, Shape{1}), c(DType::U8, Shape{5});
  fill_zero(a.view());
  fill_zero(b.view());
  fill_zero(c.view());
  write_safetensors(path,
                    {{"z", c.view(), std::nullopt},
                     {"b", a.view(), std::nullopt},
                     {"a", a.view(), DType::BF16},
                     {"y", b.view(), std::nullopt}},
                    {{"step", "100"}, {"note", "quote \" and é"}});
  const std::string bytes = read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  // Metadata first (keys sorted), then descending dtype (I64, F32, BF16, U8), then name.
  std::string want =
      "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"quote \\\" and é\",\"step\":\"100\"},"
      "\"y\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,20]},"
      "\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[20,26]},"
      "\"z\":{\"dtype\":\"U8\",\"shape\":[5],\"data_offsets\":[26,31]}}";
  want.append((8 - want.size() % 8) % 8, ' ');
  EXPECT_EQ(bytes.substr(8, n), want);
  EXPECT_EQ(bytes.size(), 8 + n + 31);
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("note"), "quote \" and é");
  // A caller's own "format" is kept.
  write_safetensors(path, {}, {{"format", "np"}});
  EXPECT_EQ(SafetensorsFile::open(path).metadata().at("format"), "np");
}

TEST(Safetensors, WriterRejectsBadRequests) {
  TempDir dir;
  const std::string path = dir.path() + "/bad.safetensors";
  HostTensor a(DType::F32, Shape{2}), ids(DType::I64, Shape{2});
  expect_input_error(
      [&] {
        write_safetensors(path, {{"a", a.view(), std::nullopt}, {"a", a.view(), std::nullopt}});
      },
      {path, "'a'", "twice"});
  expect_input_error(
      [&] {
        write_safetensors(path, {{"__metadata__", a.view(), std::nullopt}});
      },
      {path, "reserved"});
  expect_input_error(
      [&] {
        write_safetensors(path, {{"ids", ids.view(), DType::F32}});
      },
      {path, "'ids'", "i64", "f32"});
  expect_input_error(
      [&] {
        write_safetensors(path, {{"\xff", a.view(), std::nullopt}});
      },
      {path, "UTF-8"});
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(test::list_dir(dir.path()).empty());
}

TEST(Safetensors, ByteExactWithPythonSafetensors) {
  // tools/make_safetensors_fixtures.py wrote python_subset.safetensors with safetensors.torch;
  // rebuild it from its f32 tensors (bf16/f16 ones converted by ftune) and compare every byte.
  const std::string ref_path = fixture("python_subset.safetensors");
  const SafetensorsFile ref = SafetensorsFile::open(ref_path);
  std::vector<HostTensor> held;
  std::vector<SafetensorsTensor> tensors;
  held.reserve(ref.entries().size());
  for (const SafetensorsEntry& e : ref.entries()) {
    std::optional<DType> store_as;
    std::string source = e.name;
    for (auto [suffix, dtype] : {std::pair{"_bf16", DType::BF16}, std::pair{"_f16", DType::F16}}) {
      const std::string s = suffix;
      if (source.size() > s.size() && source.compare(source.size() - s.size(), s.size(), s) == 0) {
        source.resize(source.size() - s.size());
        store_as = dtype;
      }
    }
    held.push_back(ref.read(source));  // the original f32 (or integer) tensor
    tensors.push_back({e.name, held.back().view(), store_as});
  }
  ASSERT_EQ(tensors.size(), 12u);
  TempDir dir;
  const std::string path = dir.path() + "/ftune.safetensors";
  write_safetensors(path, tensors, {{"format", "pt"}});
  const std::string ours = read_file(path), theirs = read_file(ref_path);
  ASSERT_EQ(ours.size(), theirs.size());
  for (size_t i = 0; i < ours.size(); ++i)
    ASSERT_EQ(ours[i], theirs[i]) << "first difference at byte " << i;
}

TEST(Safetensors, ReadsPythonFileWithMixedDtypes) {
  const SafetensorsFile f = SafetensorsFile::open(fixture("python_mixed.safetensors"));
  const nlohmann::json expected = read_json_file(fixture("python_mixed.expected.json"));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("source"), "make_safetensors_fixtures.py");
  ASSERT_EQ(f.entries().size(), expected.size());
  for (const SafetensorsEntry& e : f.entries()) {
    SCOPED_TRACE(e.name);
    const nlohmann::json& x = expected.at(e.name);
    EXPECT_EQ(safetensors_dtype_name(e.dtype), x.at("dtype").get<std::string>());
    EXPECT_EQ(e.shape, x.at("shape").get<std::vector<int64_t>>());
    if (x.contains("f32")) {
      const HostTensor t = f.read(e.name, DType::F32);
      const auto want = x.at("f32").get<std::vector<float>>();
      ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size()));
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(t.data<float>()[i], want[i]) << i;
    } else if (x.contains("int")) {
      const auto want = x.at("int").get<std::vector<int64_t>>();
      const DType d = e.dtype == SafetensorsDtype::BOOL ? DType::U8 : *ftune_dtype(e.dtype);
      const HostTensor t = f.read(e.name, d);
      for (size_t i = 0; i < want.size(); ++i) {
        const int64_t got = d == DType::I64   ? t.data<int64_t>()[i]
                            : d == DType::I32 ? t.data<int32_t>()[i]
                                              : t.data<uint8_t>()[i];
        EXPECT_EQ(got, want[i]) << i;
      }
    } else {
      // Known to the format but not to ftune: listed with its bytes, refused on conversion.
      EXPECT_GT(e.nbytes(), 0u);
      HostTensor dst(DType::F32, Shape(e.shape.begin(), e.shape.end()));
      expect_input_error(
          [&] { f.read_into(e.name, dst.view()); },
          {"\"" + e.name + "\"", std::string(safetensors_dtype_name(e.dtype)), "cannot be read"});
      expect_input_error([&] { f.read(e.name); }, {"no dtype"});
    }
  }
}

TEST(Safetensors, ReadsUnalignedDataFromForeignWriters) {
  // A header of 13 bytes (no padding) puts the f32 data at file offset 21: misaligned.
  TempDir dir;
  const std::string path = dir.path() + "/unaligned.safetensors";
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[1,13]},"d":{"dtype":"F64","shape":[1],"data_offsets":[13,21]}})";
  std::string data(21, '\0');
  const float vals[3] = {1.5f, -2.0f, 3.25f};
  std::memcpy(&data[1], vals, 12);
  const double d = 1.0 / 3.0;
  std::memcpy(&data[13], &d, 8);
  test::write_bytes(path, test::safetensors_bytes(header, data));
  const SafetensorsFile f = SafetensorsFile::open(path);
  const HostTensor a = f.read("a", DType::F32);
  EXPECT_EQ(a.data<float>()[0], 1.5f);
  EXPECT_EQ(a.data<float>()[2], 3.25f);
  const HostTensor b = f.read("a", DType::BF16);
  EXPECT_EQ(b.data<bf16_t>()[1].bits, float_to_bf16(-2.0f).bits);
  EXPECT_EQ(f.read("d", DType::F32).data<float>()[0], static_cast<float>(d));
}

TEST(Safetensors, ReadsIntoAndWritesFromDeviceMemory) {
  SCOPED_TRACE(test::test_seed());
  std::mt19937_64 rng(test::test_seed());
  for (Device device : test::devices_present()) {
    if (device.is_cpu()) continue;
    TempDir dir;
    const std::string path = dir.path() + "/dev.safetensors";
    HostTensor w = test::random_tensor(Shape{300, 7}, rng);
    void* mem = device_malloc(device, w.view().nbytes());
    const TensorView dw(mem, DType::F32, device, Shape{300, 7});
    copy(dw, w.view());
    write_safetensors(path, {{"w", dw, DType::BF16}, {"w32", dw, std::nullopt}});
    const SafetensorsFile f = SafetensorsFile::open(path);
    fill_zero(dw);
    f.read_into("w32", dw);
    HostTensor back(DType::F32, Shape{300, 7});
    copy(back.view(), dw);
    EXPECT_TRUE(same_bytes(back.view(), w.view()));
    device_free(device, mem, w.view().nbytes());
  }
}

TEST(Safetensors, DtypeTable) {
  EXPECT_EQ(parse_safetensors_dtype("BF16"), SafetensorsDtype::BF16);
  EXPECT_EQ(parse_safetensors_dtype("bf16"), std::nullopt);
  EXPECT_EQ(safetensors_dtype_bits(SafetensorsDtype::F4), 4u);
  EXPECT_EQ(safetensors_dtype_bits(SafetensorsDtype::F6_E3M2), 6u);
  EXPECT_EQ(safetensors_dtype_bits(SafetensorsDtype::C64), 64u);
  for (DType d : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8}) {
    EXPECT_EQ(ftune_dtype(safetensors_dtype(d)), d);
    EXPECT_EQ(safetensors_dtype_bits(safetensors_dtype(d)), 8 * dtype_size(d));
  }
  EXPECT_EQ(ftune_dtype(SafetensorsDtype::BOOL), std::nullopt);
  EXPECT_EQ(ftune_dtype(SafetensorsDtype::F64), std::nullopt);
}

}  // namespace
}  // namespace ftune::io
