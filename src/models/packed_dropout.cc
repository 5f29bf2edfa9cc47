// Packed batches' dropout plans (see packed_dropout.h).
#include "models/packed_dropout.h"

#include "core/error.h"

namespace ftune {

DropoutPlan resolved_on_host(DropoutPlan d, const TokenInputs& in) {
  if (!in.packed() || d.micro == nullptr) return d;
  // On the CPU the MicroParams are host memory: check that the plan's fields are theirs.
  if (in.ids.device.is_cpu())
    FTUNE_ASSERT(d.micro->row0 == d.row0 && d.micro->offset == d.offset,
                 "a packed micro-batch's dropout plan differs from its MicroParams");
  d.micro = nullptr;
  return d;
}

}  // namespace ftune
