// Learning-rate schedules with the semantics of transformers' get_*_schedule_with_warmup: the
// LR of optimizer step s (0-based, the s-th call to optimizer.step()) is peak_lr * factor(s):
//   constant:              1 after warmup
//   linear:                decays linearly to 0 at total_steps
//   cosine:                0.5 (1 + cos(pi * progress)) (half a cycle)
// with linear warmup s / warmup_steps for s < warmup_steps in every case.
#pragma once

#include <cstdint>
#include <string>

#include "core/choice.h"

namespace ftune {

enum class ScheduleKind : uint8_t { Constant, Linear, Cosine };
// training.schedule's words, in the order the docs list them.
constexpr ChoiceNames<ScheduleKind, 3> kScheduleKindNames{{{ScheduleKind::Linear, "linear"},
                                                           {ScheduleKind::Cosine, "cosine"},
                                                           {ScheduleKind::Constant, "constant"}}};
constexpr const auto& choice_names(ScheduleKind) { return kScheduleKindNames; }

struct LrSchedule {
  ScheduleKind kind = ScheduleKind::Linear;
  double peak_lr = 5e-5;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  double factor(int64_t step) const;
  double lr(int64_t step) const { return peak_lr * factor(step); }
};

// "constant", "linear", "cosine" (also HF's "constant_with_warmup"); InputError naming `key` else.
ScheduleKind parse_schedule_kind(const std::string& name, const std::string& key);

}  // namespace ftune
