// Golden fixture loading (see golden_fixture.h).
#include "golden_fixture.h"

#include "io/json_file.h"

namespace ftune::test {
namespace {

std::vector<int32_t> read_i32(const io::SafetensorsFile& f, const std::string& name) {
  HostTensor t = f.read(name, DType::I64);
  std::vector<int32_t> out(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = static_cast<int32_t>(t.data<int64_t>()[i]);
  return out;
}

}  // namespace

GoldenCase GoldenCase::load(const std::string& name) {
  GoldenCase c{
      fixtures_dir() + "/engine/" + name, fixtures_dir() + "/engine/" + name + "/model",
      io::read_json_file(fixtures_dir() + "/engine/" + name + "/case.json"), Batch{},
      io::SafetensorsFile::open(fixtures_dir() + "/engine/" + name + "/expected.safetensors")};
  const io::SafetensorsFile inputs = io::SafetensorsFile::open(c.dir + "/inputs.safetensors");
  const io::SafetensorsEntry& ids = inputs.at("input_ids");
  c.batch.size = ids.shape[0];
  c.batch.seq_len = ids.shape[1];
  c.batch.input_ids = read_i32(inputs, "input_ids");
  c.batch.token_type_ids = read_i32(inputs, "token_type_ids");
  c.batch.attention_mask = read_i32(inputs, "attention_mask");
  c.batch.labels = read_i32(inputs, "labels");
  return c;
}

HostTensor GoldenCase::tensor(const std::string& name) const {
  return expected.read(name, DType::F32);
}

}  // namespace ftune::test
