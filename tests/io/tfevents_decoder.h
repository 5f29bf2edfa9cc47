// A minimal, independent reader of TensorBoard event files for the tests: splits TFRecords
// (checking both masked CRC-32Cs of every record) and decodes the few tensorflow.Event fields
// ftune writes, skipping any other field by its wire type as protobuf readers do.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "io/crc32c.h"

namespace ftune::test {

struct DecodedValue {
  std::string tag;
  float simple_value = 0;
};

struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<DecodedValue> values;
};

namespace tfevents_detail {

inline uint64_t read_le(std::string_view s, size_t at, int bytes) {
  if (at + bytes > s.size()) throw std::runtime_error("truncated fixed-width field");
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

inline uint64_t read_varint(std::string_view s, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (at >= s.size()) throw std::runtime_error("truncated varint");
    const auto b = static_cast<unsigned char>(s[at++]);
    v |= uint64_t(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
  throw std::runtime_error("varint longer than 10 bytes");
}

// Calls f(field, wire_type, varint_or_fixed_bits, bytes) for each field of a message.
template <typename F>
void for_each_field(std::string_view msg, F&& f) {
  size_t at = 0;
  while (at < msg.size()) {
    const uint64_t key = read_varint(msg, at);
    const int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    uint64_t bits = 0;
    std::string_view bytes;
    if (wire == 0) {
      bits = read_varint(msg, at);
    } else if (wire == 1) {
      bits = read_le(msg, at, 8);
      at += 8;
    } else if (wire == 5) {
      bits = read_le(msg, at, 4);
      at += 4;
    } else if (wire == 2) {
      const uint64_t len = read_varint(msg, at);
      if (at + len > msg.size()) throw std::runtime_error("truncated length-delimited field");
      bytes = msg.substr(at, len);
      at += len;
    } else {
      throw std::runtime_error("unsupported wire type " + std::to_string(wire));
    }
    f(field, wire, bits, bytes);
  }
}

}  // namespace tfevents_detail

// Every record's payload; throws on a bad CRC or a truncated record.
inline std::vector<std::string> split_tfrecords(std::string_view file) {
  using tfevents_detail::read_le;
  std::vector<std::string> out;
  size_t at = 0;
  while (at < file.size()) {
    const uint64_t len = read_le(file, at, 8);
    if (io::mask_crc32c(io::crc32c(file.data() + at, 8)) != read_le(file, at + 8, 4))
      throw std::runtime_error("length CRC mismatch at byte " + std::to_string(at));
    if (at + 12 + len + 4 > file.size()) throw std::runtime_error("truncated record");
    const std::string_view data = file.substr(at + 12, len);
    if (io::mask_crc32c(io::crc32c(data)) != read_le(file, at + 12 + len, 4))
      throw std::runtime_error("data CRC mismatch at byte " + std::to_string(at));
    out.emplace_back(data);
    at += 12 + len + 4;
  }
  return out;
}

inline DecodedEvent decode_event(std::string_view msg) {
  using namespace tfevents_detail;
  DecodedEvent ev;
  for_each_field(msg, [&](int field, int wire, uint64_t bits, std::string_view bytes) {
    if (field == 1 && wire == 1) std::memcpy(&ev.wall_time, &bits, 8);
    if (field == 2 && wire == 0) ev.step = static_cast<int64_t>(bits);
    if (field == 3 && wire == 2) ev.file_version = std::string(bytes);
    if (field == 5 && wire == 2)
      for_each_field(bytes, [&](int sf, int sw, uint64_t, std::string_view value) {
        if (sf != 1 || sw != 2) return;
        DecodedValue v;
        for_each_field(value, [&](int vf, int vw, uint64_t vbits, std::string_view vbytes) {
          if (vf == 1 && vw == 2) v.tag = std::string(vbytes);
          if (vf == 2 && vw == 5) {
            const auto b32 = static_cast<uint32_t>(vbits);
            std::memcpy(&v.simple_value, &b32, 4);
          }
        });
        ev.values.push_back(v);
      });
  });
  return ev;
}

inline std::vector<DecodedEvent> decode_event_file(std::string_view file) {
  std::vector<DecodedEvent> events;
  for (const std::string& rec : split_tfrecords(file)) events.push_back(decode_event(rec));
  return events;
}

}  // namespace ftune::test
