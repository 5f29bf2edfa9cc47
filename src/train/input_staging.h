// Input staging for the training step (DESIGN principle 4): the inputs of the next micro-batch are
// written into a page-locked host buffer and copied to the device on the copy stream while the
// current micro-batch computes. Two slots, each a pinned host buffer and a device buffer in the
// arena ("input/staged/0", "input/staged/1": the micro-batch's MicroParams (core/philox.h: its
// dropout place, loss share and gradient scale, read by the kernels so that a replayed CUDA graph
// sees them), then ids, type ids, position ids and mask of up to max_rows x max_seq tokens, then
// max_rows labels (a causal LM: one per token) and max_rows x W float targets (score tasks; W = 0 without); packed: ids, type
// ids and position ids of up to max_tokens tokens, the row starts, the labels and the targets —
// data/token_batch.h's layouts), used in turn, and one fixed device buffer of the same size
// ("input/graph") that the model reads:
//   stage(k)    host: wait until slot k's previous copy has left its host buffer (normally long
//               done), fill it; copy stream: wait until the compute stream released slot k, copy,
//               record "copied k"
//   acquire(k)  compute stream: wait for "copied k", copy slot k into the fixed buffer (a
//               device-to-device copy of the micro-batch's few KiB), record "released k"; the
//               model reads the fixed buffer's views
// Neither stream ever waits on the host, and the host waits only for a copy of two micro-batches
// ago. The fixed buffer is why a CUDA graph does not depend on the slot: a graph replay reads the
// addresses it was captured with, and the two slots have different ones, so graphs keyed by the
// slot were captured twice per shape; every micro-batch now reaches the kernels at the same
// addresses, and the graph key is the shape alone (train/step_graphs.h). The copy runs in stream
// order after the previous micro-batch's kernels, which read the fixed buffer before it is
// overwritten. On the CPU the same code runs with plain memory and plain copies (events are
// no-ops). Everything is allocated by bind(): nothing inside the step loop.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"
#include "data/batch.h"
#include "data/token_batch.h"
#include "models/backbone.h"

namespace ftune {

struct StagedInputs {
  TokenInputs inputs;  // views of the slot (B x T, or packed)
  TensorView labels;     // (B) i32; a causal LM's: one per token
  TensorView targets;    // (B, W) f32 float targets of a score task; undefined without
  const MicroParams* micro = nullptr;  // in the slot, on the device
};

// How padded micro-batches are padded (training.pad_to_multiple_of), bounding the shapes CUDA
// graphs and cuDNN attention plans are built for: to a multiple of `multiple` tokens, or with
// `buckets` (auto on a GPU) to the next of 8, 16, ..., 64 (multiples of 8), then four lengths per
// power of two (80, 96, 112, 128, 160, 192, 224, 256, 320, ...: at most 25% padding; 20 lengths
// up to 512 where multiples of 8 give 64). Never shorter than the longest row, never past `cap`.
struct PadRule {
  int64_t multiple = 1;
  bool buckets = false;
  int64_t length(int64_t longest, int64_t cap) const;
  std::string describe() const;  // for logs and summary.json
};

// training.pad_to_multiple_of (0 = auto) for a run on `device`: auto is length buckets on a GPU,
// no extra padding (1) on the CPU; a number N pads to multiples of N everywhere.
PadRule resolve_padding(int64_t value, Device device);

class InputStaging {
 public:
  static constexpr int kSlots = 2;

  // pad: how a padded micro-batch is padded beyond its longest row (at most the step batch's
  // length, which the trainer pads by the same rule). packed_tokens > 0: micro-batches are packed,
  // up to that many tokens.
  // target_width W: float targets per row a batch may carry (the model's scores, K; staged only
  // for batches that have targets). token_labels: a causal LM's micro-batches, whose labels are
  // one per token (Batch::token_labels) instead of one per row.
  InputStaging(int64_t max_rows, int64_t max_seq, PadRule pad = {}, int64_t packed_tokens = 0,
               int64_t target_width = 0, bool token_labels = false);
  ~InputStaging();
  InputStaging(const InputStaging&) = delete;
  InputStaging& operator=(const InputStaging&) = delete;

  void add_to_plan(ArenaPlan& plan) const;
  void bind(const Arena& arena);  // device views, pinned host buffers and events

  // Rows [row0, row0 + rows) of a right-padded, labelled step batch, cut to their own longest row
  // (as slice_rows) or packed (as layout_rows), with their position ids cut from step_positions
  // (position_ids of the step batch: row-local, so the same as those of the cut rows), into the
  // next slot; starts its copy. `micro` goes with them. Returns the slot.
  int stage(const Batch& step, const std::vector<int32_t>& step_positions, int64_t row0,
            int64_t rows, const MicroParams& micro = {});
  // The slot's inputs, copied into the fixed buffer in stream order after the slot's copy; the
  // slot is free for the next stage() once that copy ran.
  StagedInputs acquire(int slot);

 private:
  void free_host();

  int64_t max_rows_, max_seq_;
  PadRule pad_;
  int64_t packed_tokens_;
  int64_t target_width_;
  bool token_labels_;
  Device device_ = Device::cpu();
  // (kHead + 4 * max_rows * max_seq + max_rows + max_rows * W) i32 (the targets' f32 bits)
  std::array<TensorView, kSlots> slots_{};
  TensorView fixed_;                        // the same size: what the model reads
  std::array<int32_t*, kSlots> host_{};
  std::vector<int32_t> cpu_host_;  // the host buffers when the arena is on the CPU
  std::array<void*, kSlots> copied_{}, released_{};
  std::array<int64_t, kSlots> rows_{}, seq_{}, tokens_{}, used_{};  // used_: i32 elements
  std::array<int64_t, kSlots> width_{};  // targets per row staged in the slot (0: none)
  int next_ = 0;
};

}  // namespace ftune
