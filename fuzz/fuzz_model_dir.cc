// Fuzzes loading a Hugging Face model directory (fuzz_files.h format; bytes before any "@@ NAME"
// header are model.safetensors): config.json, model.safetensors or model.safetensors.index.json
// with its shards. It runs what `ftune predict` / `train` do with a downloaded directory:
// io::CheckpointReader::open (the index, every shard header, every weight_map entry), every tensor
// read into f32 (bf16 / f16 / f64 converted), then load_model_config and, for a model small
// enough to allocate here, the classifier built over an arena and load_model_weights (names,
// prefixes, shapes, dtypes). Every refusal must be an InputError.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/arena.h"
#include "core/error.h"
#include "fuzz_files.h"
#include "io/checkpoint_reader.h"
#include "models/bert/bert_checkpoint.h"
#include "models/hf_checkpoint.h"
#include "models/sequence_classifier.h"

namespace {

using namespace ftune;

// The largest arena the target allocates; a larger model's plan is still built and checked.
constexpr size_t kMaxArenaBytes = 64 << 20;

void read_weights(const std::string& dir) {
  const io::CheckpointReader ckpt = io::CheckpointReader::open(dir);
  (void)ckpt.metadata();
  for (const std::string& name : ckpt.names()) {
    const io::SafetensorsEntry& e = ckpt.at(name);
    (void)ckpt.file_of(name);
    if (e.dtype == io::SafetensorsDtype::F32 || e.dtype == io::SafetensorsDtype::BF16 ||
        e.dtype == io::SafetensorsDtype::F16 || e.dtype == io::SafetensorsDtype::F64)
      (void)ckpt.read(name, DType::F32);
  }
}

void load_model(const std::string& dir) {
  LoadOptions options;
  options.reinit_mismatched_head = true;
  const EncoderConfig config = load_model_config(dir, options);
  ClassifierOptions co;
  co.max_batch = 1;
  co.max_seq = 1;
  co.training = false;
  SequenceClassifier model(config, co);
  ArenaPlan plan;
  model.add_to_plan(plan);
  if (plan.total_bytes() > kMaxArenaBytes) return;
  Arena arena(Device::cpu(), std::move(plan));
  model.bind(arena);
  (void)load_model_weights(model, dir, options);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return ftune::fuzz::quiet_logs();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::ScratchDir dir;
  dir.reset(fuzz::split_files(std::string_view(reinterpret_cast<const char*>(data), size),
                              "model.safetensors"));
  fuzz::expect_input_error([&] { read_weights(dir.path()); });
  fuzz::expect_input_error([&] { load_model(dir.path()); });
  return 0;
}
