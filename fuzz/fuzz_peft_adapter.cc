// Fuzzes loading a PEFT adapter directory (fuzz_files.h format; bytes before any "@@ NAME" header
// are adapter_config.json; the adapter weights are adapter_model.safetensors) onto the tiny
// fixture base models (tests/fixtures/engine/bert_pair, or roberta_pair when the input mentions
// "roberta"), as `ftune export --merge` does: read_peft_adapter_config, a classifier with those
// adapters and the label count of the adapter's head, the base weights, load_peft_adapter, then
// merge_adapters. Every refusal must be an InputError.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/arena.h"
#include "core/error.h"
#include "fuzz_files.h"
#include "io/safetensors.h"
#include "models/bert/bert_checkpoint.h"
#include "models/hf_checkpoint.h"
#include "models/peft_adapter.h"
#include "models/sequence_classifier.h"

namespace {

using namespace ftune;

constexpr size_t kMaxArenaBytes = 64 << 20;

std::string base_dir(bool roberta) {
  return std::string(FTUNE_SOURCE_DIR) + "/tests/fixtures/engine/" +
         (roberta ? "roberta_pair" : "bert_pair") + "/model";
}

// The adapter head's label count, as `ftune export` reads it.
std::optional<int64_t> adapter_num_labels(const std::string& dir) {
  const auto f = io::SafetensorsFile::open(dir + "/adapter_model.safetensors");
  for (const char* key :
       {"base_model.model.classifier.weight", "base_model.model.classifier.out_proj.weight"})
    if (const io::SafetensorsEntry* e = f.find(key); e && e->shape.size() == 2) return e->shape[0];
  return std::nullopt;
}

void load(const std::string& dir, bool roberta) {
  const AdapterConfig adapters = read_peft_adapter_config(dir);
  LoadOptions lo;
  lo.num_labels = adapter_num_labels(dir);
  lo.reinit_mismatched_head = true;
  ClassifierOptions options;
  options.max_batch = 1;
  options.max_seq = 1;
  options.training = false;
  options.adapters = adapters;
  SequenceClassifier model(load_model_config(base_dir(roberta), lo), options);
  ArenaPlan plan;
  model.add_to_plan(plan);
  if (plan.total_bytes() > kMaxArenaBytes) return;
  Arena arena(Device::cpu(), std::move(plan));
  model.bind(arena);
  (void)load_model_weights(model, base_dir(roberta), lo);
  load_peft_adapter(model, dir);
  merge_adapters(model);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return ftune::fuzz::quiet_logs();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::ScratchDir dir;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  dir.reset(fuzz::split_files(input, "adapter_config.json"));
  fuzz::expect_input_error(
      [&] { load(dir.path(), input.find("roberta") != std::string_view::npos); });
  return 0;
}
