// Input staging: pinned host ring, copy stream and events (see input_staging.h).
#include "train/input_staging.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/memory.h"
#ifdef FTUNE_WITH_CUDA
#include "cuda/cuda_device.h"
#endif

namespace ftune {
namespace {

const char* kSlotNames[InputStaging::kSlots] = {"input/staged/0", "input/staged/1"};
const char* kFixedName = "input/graph";

// The MicroParams at the start of a slot, in i32 elements (the arena aligns every buffer to at
// least 16 bytes, so they are 8-aligned).
constexpr int64_t kHead = sizeof(MicroParams) / sizeof(int32_t);
static_assert(sizeof(MicroParams) % sizeof(int32_t) == 0 && sizeof(MicroParams) == 32);

// Padded: ids, types, positions, mask (rows x seq each), labels. Packed: ids, types, positions
// (tokens each), row starts (rows + 1), labels. Then rows x W float targets (as their bits).
// token_labels: a causal LM's labels, one per token instead of one per row.
int64_t slot_elements(int64_t max_rows, int64_t max_seq, int64_t packed_tokens, int64_t width,
                      bool token_labels) {
  static_assert(sizeof(float) == sizeof(int32_t));
  if (packed_tokens > 0)
    return kHead + 3 * packed_tokens + max_rows + 1 + (token_labels ? packed_tokens : max_rows) +
           max_rows * width;
  return kHead + 4 * max_rows * max_seq + (token_labels ? max_rows * max_seq : max_rows) +
         max_rows * width;
}

}  // namespace

int64_t PadRule::length(int64_t longest, int64_t cap) const {
  int64_t step = multiple;
  if (buckets && longest > 64) {
    int top = 0;  // floor(log2(longest - 1)): 65..128 -> 6, step 16
    while (((longest - 1) >> (top + 1)) != 0) ++top;
    step = int64_t{1} << (top - 2);
  }
  return padded_length(longest, step, cap);
}

std::string PadRule::describe() const {
  if (buckets)
    return fmt::format(
        "length buckets: multiples of {} up to 64 tokens, then 4 lengths per power "
        "of two (at most 25% padding)",
        multiple);
  return multiple == 1 ? "none (each micro-batch to its longest row)"
                       : fmt::format("to a multiple of {} tokens", multiple);
}

PadRule resolve_padding(int64_t value, Device device) {
  if (value < 0)
    throw InputError(fmt::format(
        "key 'training.pad_to_multiple_of' must be auto or a positive integer, got {}", value));
  if (value > 0) return PadRule{value, false};
  return device.is_cpu() ? PadRule{1, false} : PadRule{8, true};
}

InputStaging::InputStaging(int64_t max_rows, int64_t max_seq, PadRule pad, int64_t packed_tokens,
                           int64_t target_width, bool token_labels)
    : max_rows_(max_rows),
      max_seq_(max_seq),
      pad_(pad),
      packed_tokens_(packed_tokens),
      target_width_(target_width),
      token_labels_(token_labels) {
  FTUNE_ASSERT(max_rows > 0 && max_seq > 0 && pad.multiple > 0,
               "input staging for {} x {} tokens (padded to a multiple of {})", max_rows, max_seq,
               pad.multiple);
}

InputStaging::~InputStaging() { free_host(); }

void InputStaging::free_host() {
#ifdef FTUNE_WITH_CUDA
  if (!device_.is_cpu()) {
    // A copy may still read a host buffer: wait for it before freeing (destructors do not throw).
    try {
      for (int k = 0; k < kSlots; ++k) {
        if (copied_[k]) cuda::event_synchronize(copied_[k]);
        if (host_[k]) cuda::host_free_pinned(host_[k]);
        if (copied_[k]) cuda::event_destroy(copied_[k]);
        if (released_[k]) cuda::event_destroy(released_[k]);
      }
    } catch (const std::exception&) {
    }
  }
#endif
  host_ = {};
  copied_ = {};
  released_ = {};
  cpu_host_.clear();
}

void InputStaging::add_to_plan(ArenaPlan& plan) const {
  const int64_t n = slot_elements(max_rows_, max_seq_, packed_tokens_, target_width_, token_labels_);
  for (const char* name : kSlotNames) plan.add(name, DType::I32, {n});
  plan.add(kFixedName, DType::I32, {n});
}

void InputStaging::bind(const Arena& arena) {
  free_host();
  device_ = arena.device();
  const int64_t n = slot_elements(max_rows_, max_seq_, packed_tokens_, target_width_, token_labels_);
  if (device_.is_cpu()) cpu_host_.assign(static_cast<size_t>(n * kSlots), 0);
  fixed_ = arena.view(kFixedName);
  for (int k = 0; k < kSlots; ++k) {
    slots_[k] = arena.view(kSlotNames[k]);
    if (device_.is_cpu()) {
      host_[k] = cpu_host_.data() + k * n;
      continue;
    }
#ifdef FTUNE_WITH_CUDA
    host_[k] = static_cast<int32_t*>(cuda::host_alloc_pinned(static_cast<size_t>(n) * 4));
    copied_[k] = cuda::event_create(device_);
    released_[k] = cuda::event_create(device_);
#else
    throw NotBuiltError("input staging on a CUDA device, but ftune was built without CUDA");
#endif
  }
  next_ = 0;
}

int InputStaging::stage(const Batch& step, const std::vector<int32_t>& step_positions,
                        int64_t row0, int64_t rows, const MicroParams& micro) {
  FTUNE_ASSERT(host_[0] != nullptr, "InputStaging::stage before bind");
  FTUNE_ASSERT(row0 >= 0 && rows >= 1 && row0 + rows <= step.size && rows <= max_rows_,
               "staging rows [{}, {}) of a batch of {} (at most {} rows)", row0, row0 + rows,
               step.size, max_rows_);
  FTUNE_ASSERT(static_cast<int64_t>(step.labels.size()) == step.size &&
                   static_cast<int64_t>(step_positions.size()) == step.size * step.seq_len,
               "staging needs a labelled batch and its position ids");
  FTUNE_ASSERT(!token_labels_ || step.token_labels.size() == step.input_ids.size(),
               "staging a causal LM's micro-batch needs its token labels");
  const int64_t T = step.seq_len;
  const bool packed = packed_tokens_ > 0;
  // The micro-batch's own length: its longest row (right-padded: up to the last unmasked token);
  // padded, rounded up to the padding multiple, within the step batch (whose rows are padded that
  // far). Padded by the run's rule (train/input_staging.h PadRule). Packed: each row at its own
  // length, back to back.
  int64_t S = 1, n = 0;
  for (int64_t r = row0; r < row0 + rows; ++r) {
    S = std::max(S, step.row_length(r));
    n += step.row_length(r);
  }
  if (!packed) {
    S = pad_.length(S, T);
    n = rows * S;
  }
  FTUNE_ASSERT(S <= max_seq_ && (!packed || n <= packed_tokens_),
               "micro-batch of {} tokens (longest {}); staging planned for {} (longest {})", n, S,
               packed ? packed_tokens_ : max_rows_ * max_seq_, max_seq_);
  const int k = next_;
  next_ = (next_ + 1) % kSlots;
#ifdef FTUNE_WITH_CUDA
  if (!device_.is_cpu()) cuda::event_synchronize(copied_[k]);  // its last copy left the buffer
#endif
  std::memcpy(host_[k], &micro, sizeof(MicroParams));
  int32_t* h = host_[k] + kHead;
  // The fourth array: the mask (padded) or the row starts (packed).
  int32_t *ids = h, *types = h + n, *pos = h + 2 * n, *fourth = h + 3 * n;
  int32_t* labels = fourth + (packed ? rows + 1 : n);
  int64_t dst = 0;
  if (packed) fourth[0] = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t src = (row0 + r) * T, len = packed ? step.row_length(row0 + r) : S;
    std::memcpy(ids + dst, step.input_ids.data() + src, len * sizeof(int32_t));
    if (step.token_type_ids.empty())
      std::fill(types + dst, types + dst + len, 0);
    else
      std::memcpy(types + dst, step.token_type_ids.data() + src, len * sizeof(int32_t));
    std::memcpy(pos + dst, step_positions.data() + src, len * sizeof(int32_t));
    if (packed)
      fourth[r + 1] = static_cast<int32_t>(dst + len);
    else
      std::memcpy(fourth + dst, step.attention_mask.data() + src, len * sizeof(int32_t));
    if (token_labels_)
      std::memcpy(labels + dst, step.token_labels.data() + src, len * sizeof(int32_t));
    else
      labels[r] = step.labels[row0 + r];
    dst += len;
  }
  const int64_t label_count = token_labels_ ? n : rows;
  const int64_t w = step.target_width();
  FTUNE_ASSERT(w == 0 || w == target_width_,
               "a batch of {} targets per row; staging planned for {}", w, target_width_);
  if (w > 0)
    std::memcpy(labels + label_count, step.targets.data() + row0 * w,
                static_cast<size_t>(rows * w) * sizeof(float));
  const int64_t used = (labels + label_count + rows * w) - host_[k];
  if (device_.is_cpu()) {
    std::memcpy(slots_[k].data, host_[k], static_cast<size_t>(used) * sizeof(int32_t));
  } else {
#ifdef FTUNE_WITH_CUDA
    cuda::copy_to_device_on_copy_stream(slots_[k].data, device_, host_[k],
                                        static_cast<size_t>(used) * sizeof(int32_t),
                                        released_[k], copied_[k]);
#endif
  }
  used_[k] = used;
  width_[k] = w;
  rows_[k] = rows;
  seq_[k] = S;
  tokens_[k] = n;
  return k;
}

StagedInputs InputStaging::acquire(int k) {
  FTUNE_ASSERT(k >= 0 && k < kSlots && rows_[k] > 0, "input staging slot {} was not staged", k);
  const size_t used = static_cast<size_t>(used_[k]) * sizeof(int32_t);
  if (device_.is_cpu()) {
    std::memcpy(fixed_.data, slots_[k].data, used);
  } else {
#ifdef FTUNE_WITH_CUDA
    cuda::compute_stream_wait(device_, copied_[k]);
    cuda::copy_on_compute_stream(fixed_.data, device_, slots_[k].data, used);
    cuda::record_on_compute_stream(device_, released_[k]);
#endif
  }
  const int64_t B = rows_[k], n = tokens_[k];
  const bool packed = packed_tokens_ > 0;
  const TensorView d = fixed_;
  StagedInputs s;
  s.inputs.B = B;
  s.inputs.ids = d.flat_range(kHead, n);
  s.inputs.type_ids = d.flat_range(kHead + n, n);
  s.inputs.pos_ids = d.flat_range(kHead + 2 * n, n);
  if (packed) {
    s.inputs.N = n;
    s.inputs.max_len = seq_[k];
    s.inputs.cu_seqlens = d.flat_range(kHead + 3 * n, B + 1);
    s.inputs.host_cu_seqlens = host_[k] + kHead + 3 * n;
  } else {
    s.inputs.T = seq_[k];
    s.inputs.mask = d.flat_range(kHead + 3 * n, n);
  }
  const int64_t labels_at = kHead + 3 * n + (packed ? B + 1 : n);
  const int64_t label_count = token_labels_ ? n : B;
  s.labels = d.flat_range(labels_at, label_count);
  if (const int64_t w = width_[k]; w > 0) {
    const TensorView bits = d.flat_range(labels_at + label_count, B * w);
    s.targets = TensorView(bits.data, DType::F32, bits.device, Shape{B, w});
  }
  s.micro = static_cast<const MicroParams*>(d.data);
  return s;
}

}  // namespace ftune
