// Scaling in place: argument checks and dispatch (see scale.h).
#include "ops/scale.h"

#include "ops/dispatch.h"

namespace ftune {

void scale_inplace(TensorView x, float alpha) {
  const char* op = "scale_inplace";
  check_f32(op, "x", x, x.shape);
  const Device dev = common_device(op, {x});
  FTUNE_DISPATCH(op, dev, cpu::scale_inplace(x.data_as<float>(), x.numel(), alpha),
                 cuda::scale_inplace(x.data_as<float>(), x.numel(), alpha));
}

}  // namespace ftune
