// `ftune export --model BASE --adapter DIR --merge --output OUT`: folds a LoRA / DoRA adapter in
// PEFT's format (as ftune or PEFT saved it) into its base model and writes a plain Hugging Face
// model directory (config.json, model.safetensors, BASE's tokenizer files and the adapter's
// ftune.json pair template), which AutoModelForSequenceClassification loads with the adapted
// model's logits. The head comes from the adapter (PEFT's modules_to_save); its label count is
// read from there. Every file is written atomically.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "cli/commands.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "models/hf_checkpoint.h"
#include "models/peft_adapter.h"
#include "text/pair_template.h"

namespace ftune::cli {
namespace {

struct ExportArgs {
  std::string model, adapter, output;
  bool merge = false;
};

// The label count of the adapter's classification head (modules_to_save), if it has one.
std::optional<int64_t> adapter_num_labels(const std::string& adapter_dir) {
  const io::SafetensorsFile f =
      io::SafetensorsFile::open(adapter_dir + "/adapter_model.safetensors");
  for (const char* key :
       {"base_model.model.classifier.weight", "base_model.model.classifier.out_proj.weight"})
    if (const io::SafetensorsEntry* e = f.find(key); e && e->shape.size() == 2) return e->shape[0];
  return std::nullopt;
}

void run(const ExportArgs& a) {
  if (!a.merge)
    throw InputError(
        "export: only --merge is implemented (it writes the base model with the adapter folded "
        "in); the adapter directory itself is already PEFT's format");
  const AdapterConfig adapters = read_peft_adapter_config(a.adapter);
  LoadOptions lo;
  lo.num_labels = adapter_num_labels(a.adapter);
  lo.reinit_mismatched_head = true;  // the adapter's head replaces it anyway
  ClassifierOptions options;
  options.max_batch = 1;
  options.max_seq = 1;
  options.training = false;
  options.adapters = adapters;
  SequenceClassifier model(load_model_spec(a.model, lo), options);
  ArenaPlan plan;
  model.add_to_plan(plan);
  Arena arena(Device::cpu(), std::move(plan));
  model.bind(arena);
  load_model_weights(model, a.model, lo);
  load_peft_adapter(model, a.adapter);
  merge_adapters(model);
  save_model(model, a.output);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "vocab.txt", "vocab.json", "merges.txt", "sentencepiece.bpe.model"}) {
    const std::filesystem::path src = std::filesystem::path(a.model) / name;
    if (std::filesystem::exists(src))
      io::write_file_atomic((std::filesystem::path(a.output) / name).string(),
                            io::read_file(src.string()));
  }
  // The pair template the adapter was trained with (text/pair_template.h) goes with it.
  if (const auto t = text::saved_pair_template(a.adapter)) text::save_pair_template(a.output, *t);
  spdlog::info("merged {} adapter ({} parameters) into {} -> {}", peft_method_name(adapters.method),
               model.adapter_params().total(), a.model, a.output);
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* cmd =
      app.add_subcommand("export", "Merge a LoRA / DoRA adapter into its base model (HF format)");
  cmd->add_option("--model", args->model, "Base Hugging Face model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--adapter", args->adapter,
                  "Adapter directory in PEFT's format (adapter_config.json, "
                  "adapter_model.safetensors)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--merge", args->merge, "Fold the adapter into the base weights");
  cmd->add_option("--output", args->output, "Output model directory")->required();
  cmd->callback([args] { run(*args); });
}

}  // namespace ftune::cli
