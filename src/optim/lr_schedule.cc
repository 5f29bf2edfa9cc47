// LR schedule factors (see lr_schedule.h).
#include "optim/lr_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ftune {

double LrSchedule::factor(int64_t step) const {
  if (step < warmup_steps) return double(step) / double(std::max<int64_t>(1, warmup_steps));
  switch (kind) {
    case ScheduleKind::Constant:
      return 1.0;
    case ScheduleKind::Linear:
      return std::max(0.0, double(total_steps - step) /
                               double(std::max<int64_t>(1, total_steps - warmup_steps)));
    case ScheduleKind::Cosine: {
      const double progress =
          double(step - warmup_steps) / double(std::max<int64_t>(1, total_steps - warmup_steps));
      return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * 0.5 * 2.0 * progress)));
    }
  }
  return 1.0;
}

ScheduleKind parse_schedule_kind(const std::string& name, const std::string& key) {
  if (name == "constant_with_warmup") return ScheduleKind::Constant;  // HF's name
  if (auto kind = find_choice(kScheduleKindNames, name)) return *kind;
  throw InputError(fmt::format("{}: unknown schedule '{}'; expected {}", key, name,
                               either(choice_words(kScheduleKindNames))));
}

}  // namespace ftune
