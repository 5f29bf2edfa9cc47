// Input staging for the training step (DESIGN principle 4): the inputs of the next micro-batch are
// written into a page-locked host buffer and copied to the device on the copy stream while the
// current micro-batch computes. Two slots, each a pinned host buffer and a device buffer in the
// arena ("input/staged/0", "input/staged/1": the micro-batch's MicroParams (core/philox.h: its
// dropout place, loss share and gradient scale, read by the kernels so that a replayed CUDA graph
// sees them), then ids, type ids, position ids and mask of up to max_rows x max_seq tokens, then
// max_rows labels; packed: ids, type ids and position ids of up to max_tokens tokens, the row
// starts and the labels — data/token_batch.h's layouts), used in turn:
//   stage(k)    host: wait until slot k's previous copy has left its host buffer (normally long
//               done), fill it; copy stream: wait until the compute stream released slot k, copy,
//               record "copied k"
//   acquire(k)  compute stream: wait for "copied k"; the model reads the slot's device views
//   release(k)  compute stream: record "released k" after the micro-batch's last kernel
// Neither stream ever waits on the host, and the host waits only for a copy of two micro-batches
// ago. On the CPU the same code runs with plain memory and plain copies (events are no-ops).
// Everything is allocated by bind(): nothing inside the step loop.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "data/batch.h"
#include "data/token_batch.h"
#include "models/backbone.h"

namespace ftune {

struct StagedInputs {
  TokenInputs inputs;  // views of the slot (B x T, or packed)
  TensorView labels;     // (B) i32
  const MicroParams* micro = nullptr;  // in the slot, on the device
};

class InputStaging {
 public:
  static constexpr int kSlots = 2;

  // pad_multiple: a micro-batch is padded to a multiple of this many tokens (at most the step
  // batch's length, which the trainer pads likewise; train/step_graphs.h), not just to its
  // longest row. packed_tokens > 0: micro-batches are packed, up to that many tokens.
  InputStaging(int64_t max_rows, int64_t max_seq, int64_t pad_multiple = 1,
               int64_t packed_tokens = 0);
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
  // The slot's inputs on the device, in stream order after its copy.
  StagedInputs acquire(int slot);
  // The compute stream is done with the slot (after the micro-batch's backward).
  void release(int slot);

 private:
  void free_host();

  int64_t max_rows_, max_seq_, pad_multiple_, packed_tokens_;
  Device device_ = Device::cpu();
  std::array<TensorView, kSlots> slots_{};  // (kHead + 4 * max_rows * max_seq + max_rows) i32
  std::array<int32_t*, kSlots> host_{};
  std::vector<int32_t> cpu_host_;  // the host buffers when the arena is on the CPU
  std::array<void*, kSlots> copied_{}, released_{};
  std::array<int64_t, kSlots> rows_{}, seq_{}, tokens_{};
  int next_ = 0;
};

}  // namespace ftune
