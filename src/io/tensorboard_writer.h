// TensorBoard scalar logging without TensorFlow or protobuf: an events.out.tfevents.<secs>.<host>
// file of TFRecords (u64 length, masked CRC-32C of the length, the bytes, masked CRC-32C of the
// bytes), each holding a hand-encoded tensorflow.Event. The first record is the file_version
// "brain.Event:2" event TensorBoard expects; every later one is
//   Event { wall_time (1: double), step (2: int64), summary (5) { value (1) { tag (1: string),
//           simple_value (2: float) } ... } }.
// Each logging call appends its whole record with one write(2) and returns only once it is in the
// file, so TensorBoard can read the file at any moment (a reader that meets a record still being
// written treats it as not yet there, as for any event file of a live TensorFlow run).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ftune::io {

// One scalar of an event: tag and value (stored as float, as TensorBoard's simple_value is).
struct ScalarValue {
  std::string tag;
  double value;
};

// The numbers of a JSON object as scalars tagged "<prefix><key>", nested objects as
// "<prefix><key>/<sub key>"; arrays (a confusion matrix), strings, booleans and nulls are left out.
// E.g. writer.add_scalars(step, scalars_from_json("eval/", metrics.to_json())).
std::vector<ScalarValue> scalars_from_json(const std::string& prefix, const nlohmann::json& object);

// Bytes of one TFRecord framing `data`.
std::string tfrecord(std::string_view data);
// Serialized Event{wall_time, step, file_version}: the first event of every file.
std::string encode_file_version_event(double wall_time, std::string_view version = "brain.Event:2");
// Serialized Event{wall_time, step, summary{value{tag, simple_value}...}}.
std::string encode_scalar_event(double wall_time, int64_t step,
                                const std::vector<ScalarValue>& values);

class TensorBoardWriter {
 public:
  // Creates `log_dir` if needed and a new events.out.tfevents.<secs>.<host> file in it (a numeric
  // suffix is added if a file of that name exists already), then writes the file_version event.
  // Wall times are seconds since the Unix epoch from the system clock.
  explicit TensorBoardWriter(const std::string& log_dir);
  // Same, with the start time and host name given (reproducible files for tests and fixtures).
  TensorBoardWriter(const std::string& log_dir, double start_wall_time, std::string host);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Appends one event holding `values` at `step`, stamped with the current time or `wall_time`.
  // Errors raise InputError naming the file.
  void add_scalars(int64_t step, const std::vector<ScalarValue>& values);
  void add_scalars(int64_t step, const std::vector<ScalarValue>& values, double wall_time);
  void add_scalar(const std::string& tag, double value, int64_t step) {
    add_scalars(step, {{tag, value}});
  }
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
    add_scalars(step, {{tag, value}}, wall_time);
  }

  const std::string& path() const { return path_; }

 private:
  void append(std::string_view bytes);

  std::string path_;
  int fd_ = -1;
};

// Seconds since the Unix epoch, with sub-second resolution (an Event's wall_time).
double unix_time_now();

}  // namespace ftune::io
