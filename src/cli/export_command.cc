// `ftune export --model BASE --adapter DIR --merge --output OUT`: folds a LoRA / DoRA adapter in
// PEFT's format (as ftune or PEFT saved it) into its base model and writes a plain Hugging Face
// model directory (config.json, model.safetensors, BASE's tokenizer files and the adapter's
// ftune.json pair template), which AutoModelForSequenceClassification loads with the adapted
// model's logits. The head comes from the adapter (PEFT's modules_to_save); its label count is
// read from there. The new directory is built beside --output and swapped in whole (an
// interrupted export leaves the old one and no temporary, SIGTERM included); --output may not be,
// contain or lie inside --model or --adapter, and an existing --output is replaced only when it is
// empty or an earlier export (marked by .ftune-export). Non-finite weights, and a merge that
// overflows, are refused naming the tensor.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "io/atomic_file.h"
#include "io/path_guard.h"
#include "io/safetensors.h"
#include "io/signal_cleanup.h"
#include "models/hf_checkpoint.h"
#include "models/peft_adapter.h"
#include "text/pair_template.h"

namespace ftune::cli {
namespace {

namespace fs = std::filesystem;

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

// The file that marks a directory as an export of ftune's: only such a directory (or an empty one)
// is replaced by a later export to the same --output.
constexpr const char* kExportMarker = ".ftune-export";

// --output may be new, an empty directory, or an earlier export; anything else is the user's.
void check_replaceable(const fs::path& target, const std::string& spelled) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(target, ec);
  if (ec || !fs::exists(st)) return;
  if (!fs::is_directory(st))
    throw InputError(fmt::format("--output {} exists and is not a directory", spelled));
  if (fs::exists(target / kExportMarker) || fs::is_empty(target)) return;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(target)) {
    if (names.size() == 5) {
      names.push_back("...");
      break;
    }
    names.push_back(e.path().filename().string());
  }
  throw InputError(fmt::format(
      "--output {} is a directory that ftune export did not write (it holds {}; no {} marker): "
      "ftune replaces only its own exports; choose a new or empty directory",
      spelled, fmt::join(names, ", "), kExportMarker));
}

// FTUNE_DEBUG_EXPORT_PAUSE_MS=ms: the export sleeps with its new directory half-written (tests
// interrupt it there).
void debug_pause(const fs::path& building) {
  const char* v = std::getenv("FTUNE_DEBUG_EXPORT_PAUSE_MS");
  if (!v || !*v) return;
  spdlog::info("debug: pausing {} ms with the export half-written in {}", v, building.string());
  std::this_thread::sleep_for(std::chrono::milliseconds(std::atoll(v)));
}

void run(const ExportArgs& a) {
  if (!a.merge)
    throw InputError(
        "export: only --merge is implemented (it writes the base model with the adapter folded "
        "in); the adapter directory itself is already PEFT's format");
  // Never over an input: --output equal to, inside or around --model or --adapter (any spelling).
  io::refuse_output_over_inputs({"--output", a.output},
                                {{"--model", a.model}, {"--adapter", a.adapter}}, true);
  fs::path target = fs::absolute(a.output).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();
  check_replaceable(target, a.output);
  io::remove_temporaries_on_signals();
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
  load_model_weights(model, a.model, lo);  // non-finite weights are refused here
  load_peft_adapter(model, a.adapter);
  merge_adapters(model);  // and a merge that overflows here
  // The new directory is built beside the target and swapped in whole: an interrupted export
  // (an error, a full disk, SIGTERM) leaves the old one as it was and no temporary behind.
  fs::create_directories(target.parent_path());
  const fs::path building =
      target.parent_path() /
      fmt::format(".{}.tmp-export-{}", target.filename().string(), ::getpid());
  io::SignalTemporary building_guard(building.string(), true);
  try {
    fs::remove_all(building);
    fs::create_directory(building);
    save_model(model, building.string());
    debug_pause(building);
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                             "vocab.txt", "vocab.json", "merges.txt", "sentencepiece.bpe.model"}) {
      const fs::path src = fs::path(a.model) / name;
      if (fs::exists(src))
        io::write_file_atomic((building / name).string(), io::read_file(src.string()));
    }
    // The pair template the adapter was trained with (text/pair_template.h) goes with it.
    if (const auto t = text::saved_pair_template(a.adapter))
      text::save_pair_template(building.string(), *t);
    io::write_file_atomic((building / kExportMarker).string(),
                          "{\"written_by\": \"ftune export\"}\n");
    io::replace_directory(building.string(), target.string(),
                          (target.parent_path() /
                           fmt::format(".{}.old-export-{}", target.filename().string(), ::getpid()))
                              .string());
  } catch (...) {
    std::error_code ec;
    fs::remove_all(building, ec);
    throw;
  }
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
