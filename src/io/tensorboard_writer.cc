// TFRecord framing and hand-written protobuf encoding of TensorBoard scalar events.
#include "io/tensorboard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "io/crc32c.h"

namespace ftune::io {
namespace {

// Protobuf wire format: a key is (field_number << 3) | wire_type; 0 varint, 1 fixed64,
// 2 length-delimited, 5 fixed32. Fixed-width values are little-endian.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}

void put_fixed(std::string& out, uint64_t bits, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
}

void put_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  put_key(out, field, 1);
  put_fixed(out, bits, 8);
}

void put_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  put_key(out, field, 5);
  put_fixed(out, bits, 4);
}

void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// tensorflow.Event field numbers.
constexpr int kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
// tensorflow.Summary / Summary.Value field numbers.
constexpr int kSummaryValue = 1, kValueTag = 1, kValueSimpleValue = 2;

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

std::vector<ScalarValue> scalars_from_json(const std::string& prefix,
                                           const nlohmann::json& object) {
  std::vector<ScalarValue> out;
  if (!object.is_object()) return out;
  for (const auto& [key, value] : object.items()) {
    if (value.is_number()) {
      out.push_back({prefix + key, value.get<double>()});
    } else if (value.is_object()) {
      for (ScalarValue& v : scalars_from_json(prefix + key + "/", value))
        out.push_back(std::move(v));
    }
  }
  return out;
}

std::string tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  std::string len;
  put_fixed(len, data.size(), 8);
  out += len;
  put_fixed(out, mask_crc32c(crc32c(len)), 4);
  out.append(data);
  put_fixed(out, mask_crc32c(crc32c(data)), 4);
  return out;
}

std::string encode_file_version_event(double wall_time, std::string_view version) {
  std::string ev;
  put_double(ev, kEventWallTime, wall_time);
  put_bytes(ev, kEventFileVersion, version);
  return ev;
}

std::string encode_scalar_event(double wall_time, int64_t step,
                                const std::vector<ScalarValue>& values) {
  std::string summary;
  for (const ScalarValue& v : values) {
    std::string value;
    put_bytes(value, kValueTag, v.tag);
    put_float(value, kValueSimpleValue, static_cast<float>(v.value));
    put_bytes(summary, kSummaryValue, value);
  }
  std::string ev;
  put_double(ev, kEventWallTime, wall_time);
  // int64 fields are varints of the two's-complement bits (a negative step takes 10 bytes).
  put_key(ev, kEventStep, 0);
  put_varint(ev, static_cast<uint64_t>(step));
  put_bytes(ev, kEventSummary, summary);
  return ev;
}

double unix_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

TensorBoardWriter::TensorBoardWriter(const std::string& log_dir)
    : TensorBoardWriter(log_dir, unix_time_now(), host_name()) {}

TensorBoardWriter::TensorBoardWriter(const std::string& log_dir, double start_wall_time,
                                     std::string host) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  if (ec)
    throw InputError(
        fmt::format("cannot create TensorBoard directory {}: {}", log_dir, ec.message()));
  // TensorFlow's name: events.out.tfevents.%010d.<host>; TensorBoard finds files by "tfevents".
  const std::string base = fmt::format("{}/events.out.tfevents.{:010d}.{}", log_dir,
                                       static_cast<int64_t>(std::floor(start_wall_time)), host);
  for (int attempt = 0; fd_ < 0; ++attempt) {
    path_ = attempt == 0 ? base : fmt::format("{}.{}", base, attempt);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0 && (errno != EEXIST || attempt >= 1000))
      throw InputError(
          fmt::format("cannot create TensorBoard event file {}: {}", path_, std::strerror(errno)));
  }
  append(tfrecord(encode_file_version_event(start_wall_time)));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<ScalarValue>& values) {
  add_scalars(step, values, unix_time_now());
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<ScalarValue>& values,
                                    double wall_time) {
  append(tfrecord(encode_scalar_event(wall_time, step, values)));
}

void TensorBoardWriter::append(std::string_view bytes) {
  // O_APPEND and one write per record: a record is never interleaved with another writer's.
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw InputError(fmt::format("cannot write TensorBoard event file {}: {}", path_,
                                   n < 0 ? std::strerror(errno) : "no progress"));
    done += static_cast<size_t>(n);
  }
}

}  // namespace ftune::io
