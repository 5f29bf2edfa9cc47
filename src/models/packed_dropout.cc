// Packed batches' dropout plans (see packed_dropout.h).
#include "models/packed_dropout.h"

#include "core/error.h"

namespace ftune {

DropoutPlan resolved_on_host(DropoutPlan d, const TokenInputs& in) {
  if (!in.packed() || d.micro == nullptr) return d;
  FTUNE_ASSERT(in.ids.device.is_cpu(), "packed batches run on the CPU");
  d.offset = d.micro->offset;
  d.row0 = d.micro->row0;
  d.micro = nullptr;
  return d;
}

}  // namespace ftune
