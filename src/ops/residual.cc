// Residual add: argument checks and dispatch; the backward is two copies.
#include "ops/residual.h"

#include "core/memory.h"
#include "ops/dispatch.h"

namespace ftune {

void residual_forward(TensorView out, TensorView a, TensorView b) {
  const char* op = "residual_forward";
  check_f32(op, "a", a, a.shape);
  check_f32(op, "b", b, a.shape);
  check_f32(op, "out", out, a.shape);
  const Device dev = common_device(op, {out, a, b});
  FTUNE_DISPATCH(op, dev,
                 cpu::residual_forward(out.data_as<float>(), a.data_as<float>(), b.data_as<float>(),
                                       a.numel()),
                 cuda::residual_forward(out.data_as<float>(), a.data_as<float>(),
                                        b.data_as<float>(), a.numel()));
}

void residual_backward(TensorView da, TensorView db, TensorView dout) {
  const char* op = "residual_backward";
  check_f32(op, "dout", dout, dout.shape);
  check_f32(op, "da", da, dout.shape);
  check_f32(op, "db", db, dout.shape);
  common_device(op, {da, db, dout});
  copy(da, dout);
  copy(db, dout);
}

}  // namespace ftune
