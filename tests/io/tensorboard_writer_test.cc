// TensorBoard event files: CRC-32C on the standard vectors (RFC 3720 B.4 and the "123456789"
// check value), TFRecord framing, protobuf encoding read back by an independent decoder, and a
// golden file: ftune re-writes tests/fixtures/io/tensorboard/ byte for byte, and its scalars
// decode to exactly what TensorBoard's own EventAccumulator printed for it
// (tools/check_tensorboard.py, output committed as tensorboard_golden.expected.txt).
#include "io/tensorboard_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/crc32c.h"
#include "io_test_helpers.h"
#include "test_util.h"
#include "tfevents_decoder.h"

namespace ftune::io {
namespace {

TEST(Crc32c, StandardVectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c("a"), 0xC1D04330u);
  // RFC 3720 appendix B.4: 32 bytes of 0x00, of 0xFF, ascending and descending.
  std::string zeros(32, '\0'), ones(32, '\xFF'), up(32, 0), down(32, 0);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<char>(i);
    down[i] = static_cast<char>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
  // Streaming in pieces equals one call.
  EXPECT_EQ(crc32c("56789", 5, crc32c("1234", 4)), 0xE3069283u);
}

TEST(Crc32c, MaskRoundTrips) {
  for (uint32_t c : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu, 0x80000000u})
    EXPECT_EQ(unmask_crc32c(mask_crc32c(c)), c);
  // TensorFlow's masked CRC of an empty record's length (8 zero bytes), as seen in every
  // tfevents file written by TF for a zero-length record.
  EXPECT_EQ(mask_crc32c(0x8A9136AAu), ((0x8A9136AAu >> 15) | (0x8A9136AAu << 17)) + 0xa282ead8u);
}

TEST(TfRecord, FramesDataWithMaskedCrcs) {
  const std::string rec = tfrecord("hello");
  ASSERT_EQ(rec.size(), 8u + 4 + 5 + 4);
  EXPECT_EQ(rec.substr(0, 8), std::string("\x05\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(rec.substr(12, 5), "hello");
  const auto recs = test::split_tfrecords(rec + tfrecord(""));
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0], "hello");
  EXPECT_EQ(recs[1], "");
  std::string bad = rec;
  bad[13] ^= 1;  // flip a data bit: the decoder must notice
  EXPECT_THROW(test::split_tfrecords(bad), std::runtime_error);
}

TEST(TensorBoardEvent, EncodesFieldsAnIndependentDecoderReads) {
  // Hand-checked bytes of Event{wall_time: 1.5, step: 3, summary{value{tag:"a", simple_value:2}}}
  const std::string ev = encode_scalar_event(1.5, 3, {{"a", 2.0}});
  const std::string expect = std::string("\x09\0\0\0\0\0\0\xF8\x3F", 9) + "\x10\x03" + "\x2A\x0A" +
                             "\x0A\x08" + "\x0A\x01" + "a" + std::string("\x15\0\0\0\x40", 5);
  EXPECT_EQ(ev, expect);
  const auto d = test::decode_event(encode_scalar_event(-2.25, -7, {{"x/y", 0.1}, {"z", -3}}));
  EXPECT_EQ(d.wall_time, -2.25);
  EXPECT_EQ(d.step, -7);  // negative int64: 10-byte varint
  ASSERT_EQ(d.values.size(), 2u);
  EXPECT_EQ(d.values[0].tag, "x/y");
  EXPECT_EQ(d.values[0].simple_value, 0.1f);
  EXPECT_EQ(d.values[1].simple_value, -3.0f);
  EXPECT_EQ(test::decode_event(encode_file_version_event(4.0)).file_version, "brain.Event:2");
}

// The golden file's content: fixed wall times and host, several events, a multi-value event, a
// step beyond 32 bits.
std::string write_golden_events(const std::string& dir) {
  TensorBoardWriter w(dir, 1700000000.25, "golden");
  w.add_scalars(0, {{"train/loss", 0.6931471805599453}, {"train/lr", 2e-05}}, 1700000001.5);
  w.add_scalar("train/loss", 0.4375, 10, 1700000012.75);
  w.add_scalar("train/samples_per_second", 412.5, 10, 1700000012.75);
  w.add_scalars(10, {{"eval/accuracy", 0.8125}, {"eval/roc_auc", 0.90625}, {"eval/mcc", -0.125}},
                1700000013.0);
  w.add_scalar("train/loss", 0.1, 20, 1700000020.5);
  w.add_scalar("train/loss", 1e-07, 1234567890123, 1700000099.125);
  return w.path();
}

// Scalars in the format of tools/check_tensorboard.py: tags sorted, each tag's events in file
// order, "tag<TAB>step<TAB>wall_time(%.6f)<TAB>value(%.9g)".
std::string format_scalars(const std::vector<test::DecodedEvent>& events) {
  std::vector<std::tuple<std::string, int64_t, double, float, size_t>> rows;
  for (const auto& ev : events)
    for (const auto& v : ev.values)
      rows.emplace_back(v.tag, ev.step, ev.wall_time, v.simple_value, rows.size());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  std::string out = fmt::format("file_version\t{}\n", events.at(0).file_version);
  for (const auto& [tag, step, wall, value, order] : rows)
    out += fmt::format("{}\t{}\t{:.6f}\t{:.9g}\n", tag, step, wall, double(value));
  return out;
}

TEST(TensorBoardWriter, RewritesGoldenFileByteForByteAndParsesItBack) {
  test::TempDir dir;
  const std::string path = write_golden_events(dir.path());
  const std::string name = std::filesystem::path(path).filename().string();
  EXPECT_EQ(name, "events.out.tfevents.1700000000.golden");
  const std::string golden_dir = test::fixtures_dir() + "/io/tensorboard";
  if (std::getenv("FTUNE_UPDATE_GOLDEN")) {
    std::filesystem::create_directories(golden_dir);
    write_file_atomic(golden_dir + "/" + name, read_file(path));
  }
  const std::string golden = read_file(golden_dir + "/" + name);
  EXPECT_EQ(read_file(path), golden) << "ftune no longer writes the golden event file";

  const auto events = test::decode_event_file(golden);
  ASSERT_EQ(events.size(), 7u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[0].wall_time, 1700000000.25);
  EXPECT_EQ(events[6].step, 1234567890123);
  EXPECT_EQ(format_scalars(events),
            read_file(test::fixtures_dir() + "/io/tensorboard_golden.expected.txt"))
      << "the C++ decoder disagrees with TensorBoard's EventAccumulator";
}

TEST(TensorBoardWriter, FileIsCompleteAfterEveryCallAndNamesAreUnique) {
  test::TempDir dir;
  TensorBoardWriter w(dir.path() + "/tb/run1");
  EXPECT_NE(w.path().find("/tb/run1/events.out.tfevents."), std::string::npos);
  EXPECT_EQ(test::decode_event_file(read_file(w.path())).size(), 1u);
  for (int step = 1; step <= 5; ++step) {
    w.add_scalar("loss", 1.0 / step, step);
    // Read while the writer is open: every record is already complete in the file.
    const auto events = test::decode_event_file(read_file(w.path()));
    ASSERT_EQ(events.size(), size_t(step) + 1);
    EXPECT_EQ(events.back().step, step);
    EXPECT_EQ(events.back().values.at(0).simple_value, float(1.0 / step));
    EXPECT_NEAR(events.back().wall_time, unix_time_now(), 60);
  }
  // Same second and host: the second writer gets a suffixed name instead of clobbering the first.
  TensorBoardWriter a(dir.path(), 1e9, "h"), b(dir.path(), 1e9, "h");
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(test::decode_event_file(read_file(a.path())).size(), 1u);
}

TEST(TensorBoardWriter, ScalarsFromJsonFlattenNumbersOnly) {
  const auto j = nlohmann::json::parse(R"({"loss": 0.5, "rows": 12, "confusion": [[1, 2], [3, 4]],
      "roc_auc": null, "name": "x", "flag": true, "at_threshold": {"f1": 0.75, "chosen_by": "f1"}})");
  const auto v = scalars_from_json("eval/", j);
  std::vector<std::pair<std::string, double>> got;
  for (const auto& s : v) got.emplace_back(s.tag, s.value);
  std::sort(got.begin(), got.end());
  const std::vector<std::pair<std::string, double>> expect = {
      {"eval/at_threshold/f1", 0.75}, {"eval/loss", 0.5}, {"eval/rows", 12}};
  EXPECT_EQ(got, expect);
}

TEST(TensorBoardWriter, UnwritableDirectoryIsAnInputError) {
  test::TempDir dir;
  const std::string file = dir.path() + "/plain_file";
  write_file_atomic(file, "x");
  try {
    TensorBoardWriter w(file + "/sub");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ftune::io
