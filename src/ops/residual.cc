// Residual add: argument checks and dispatch; the backward is two copies.
#include "ops/residual.h"

#include "core/memory.h"
#include "ops/cast.h"
#include "ops/dispatch.h"

namespace ftune {

void residual_forward(TensorView out, TensorView a, TensorView b) {
  const char* op = "residual_forward";
  if (a.dtype != DType::F32 || b.dtype != DType::F32 || out.dtype != DType::F32) {
    check_float(op, "a", a, a.shape);
    check_float(op, "b", b, a.shape);
    check_float(op, "out", out, a.shape);
    const Device dev = common_device(op, {out, a, b});
    const int64_t n = a.numel();
    FTUNE_DISPATCH(
        op, dev,
        {
          int64_t ld;
          const float* x = cpu::stage_f32(a.data, a.dtype, 1, n, n, 0, &ld);
          const float* y = cpu::stage_f32(b.data, b.dtype, 1, n, n, 1, &ld);
          float* s = out.dtype == DType::F32 ? out.data_as<float>() : cpu::staging(2, n);
          cpu::residual_forward(s, x, y, n);
          if (out.dtype != DType::F32) cpu::store_f32(out.data, out.dtype, s, 1, n, n);
        },
        cuda::residual_forward_mixed(out.data, out.dtype, a.data, a.dtype, b.data, b.dtype, n));
    return;
  }
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
