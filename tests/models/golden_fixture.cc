// Golden fixture loading (see golden_fixture.h).
#include "golden_fixture.h"

#include <algorithm>
#include <cmath>

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
  if (inputs.find("targets")) {  // score and multi-label cases (tools/make_score_fixtures.py)
    const HostTensor t = inputs.read("targets", DType::F32);
    c.batch.targets.assign(t.data<float>(), t.data<float>() + t.numel());
  }
  return c;
}

HostTensor GoldenCase::tensor(const std::string& name) const {
  return expected.read(name, DType::F32);
}

AdamComparison compare_after_adam(TensorView got_view, TensorView want_view, TensorView g0_view,
                                  double noise_bound, const std::string& what) {
  const auto got = to_vector(got_view), want = to_vector(want_view), g0 = to_vector(g0_view);
  AdamComparison r;
  double scale = 1e-6, g_max = 0, diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(double(want[i])));
    g_max = std::max(g_max, std::fabs(double(g0[i])));
  }
  for (size_t i = 0; i < want.size(); ++i) {
    if (g0[i] != 0.0f && std::fabs(g0[i]) < 1e-5 * g_max) {
      EXPECT_NEAR(got[i], want[i], noise_bound) << what << "[" << i << "]";
      ++r.noise_elements;
    } else {
      diff = std::max(diff, std::fabs(double(got[i]) - want[i]));
    }
  }
  r.rel_error = diff / scale;
  return r;
}

AdamWOptions fixture_adamw(const nlohmann::json& optimizer) {
  AdamWOptions adam;
  adam.lr = optimizer["lr"].get<float>();
  adam.beta1 = optimizer["betas"][0].get<float>();
  adam.beta2 = optimizer["betas"][1].get<float>();
  adam.eps = optimizer["eps"].get<float>();
  adam.weight_decay = optimizer["weight_decay"].get<float>();
  return adam;
}

}  // namespace ftune::test
