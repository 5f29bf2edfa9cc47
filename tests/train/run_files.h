// What a finished training run left, read back for comparisons between runs: the logged train
// loss of every step (metrics.jsonl) and every tensor of a safetensors file as floats.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace ftune::test {

// step -> logged train loss of the run directory `run`.
inline std::map<int64_t, double> step_losses(const std::string& run) {
  std::map<int64_t, double> out;
  std::ifstream in(run + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["split"] == "train") out[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return out;
}

// name -> values of every tensor in the safetensors file `file`, as fp32.
inline std::map<std::string, std::vector<float>> tensor_values(const std::string& file) {
  const auto f = io::SafetensorsFile::open(file);
  std::map<std::string, std::vector<float>> out;
  for (const auto& e : f.entries()) {
    const HostTensor t = f.read(e.name, DType::F32);
    out[e.name].assign(t.data<float>(), t.data<float>() + t.numel());
  }
  return out;
}

}  // namespace ftune::test
