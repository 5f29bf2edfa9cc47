// Cast: argument checks and dispatch.
#include "ops/cast.h"

#include "ops/dispatch.h"

namespace ftune {

void cast(TensorView out, TensorView inp) {
  const char* op = "cast";
  check_float(op, "inp", inp, inp.shape);
  check_float(op, "out", out, inp.shape);
  const Device dev = common_device(op, {out, inp});
  if (inp.numel() == 0) return;
  FTUNE_DISPATCH(op, dev, cpu::cast(out.data, out.dtype, inp.data, inp.dtype, inp.numel()),
                 cuda::cast(out.data, out.dtype, inp.data, inp.dtype, inp.numel()));
}

}  // namespace ftune
