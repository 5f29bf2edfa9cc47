// trainer_state.json, the resume state of a checkpoint (train/checkpoint_store.h): the data cursor
// and counters, the micro-batch in use, the loss scale, the evaluations, the early-stopping state
// and the fingerprints of the inputs the run was started with. The trainer writes it; reading
// validates every field, so a corrupt or hand-edited file is refused with an InputError naming the
// file and the key before any of it is used.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace ftune {

struct TrainerState {
  static constexpr int64_t kVersion = 2;  // micro-batches count rows, not steps
  int64_t step = 0;                       // the data cursor: the next step trains on batch `step`
  int64_t micro_batch = 1;                // rows per forward pass when it was written (>= 1)
  int64_t micro_tokens = 0;               // packed micro-batches' token budget; 0: padded
  int64_t micro_batches = 0;
  int64_t optimizer_steps = 0;
  int64_t samples = 0;
  int64_t real_tokens = 0;
  int64_t skipped_steps = 0;
  int64_t nonfinite_in_row = 0;
  std::optional<float> loss_scale;  // with loss_scale_good_steps, when present
  int64_t loss_scale_good_steps = 0;
  double train_seconds = 0;
  double input_wait_seconds = 0;
  nlohmann::json best_eval, last_eval;  // null or evaluation objects
  nlohmann::json early_stopping;        // an object, for EarlyStopping::restore
  bool gradient_checkpointing = false;
  int64_t threads = 0;
  int64_t ranks = 1;  // data-parallel ranks that wrote it (1 in files from before issue 20)
  nlohmann::json fingerprints;  // an object with model, tokenizer, data and config
  // The open logging window when the checkpoint was written (absent in older files).
  struct Window {
    int64_t steps = 0, samples = 0, real_tokens = 0;
    double loss_sum = 0, seconds = 0;
  };
  std::optional<Window> window;
  std::string stopped_by = "completed";  // what stopped the run (an early-stopped run stays so)
};

// Validates the content of trainer_state.json (`path` names it in errors).
TrainerState parse_trainer_state(const nlohmann::json& j, const std::string& path);
TrainerState read_trainer_state(const std::string& path);

}  // namespace ftune
