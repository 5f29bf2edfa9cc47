// Cast: argument checks and dispatch.
#include "ops/cast.h"

#include "ops/dispatch.h"

namespace ftune {

void cast(TensorView out, TensorView inp) {
  const char* op = "cast";
  if (inp.rank() == 2 && (!inp.is_contiguous() || !out.is_contiguous())) {
    const int64_t rows = inp.dim(0), cols = inp.dim(1);
    const int64_t ldi = row_stride_float(op, "inp", inp, rows, cols);
    const int64_t ldo = row_stride_float(op, "out", out, rows, cols);
    const Device dev = common_device(op, {out, inp});
    if (rows * cols == 0) return;
    FTUNE_DISPATCH(
        op, dev,
        {
          int64_t ld;
          const float* x = cpu::stage_f32(inp.data, inp.dtype, rows, cols, ldi, 0, &ld);
          if (ld == cols) {
            cpu::store_f32(out.data, out.dtype, x, rows, cols, ldo);
          } else {  // f32 -> any: through contiguous scratch
            float* t = cpu::staging(0, rows * cols);
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t c = 0; c < cols; ++c) t[r * cols + c] = x[r * ld + c];
            cpu::store_f32(out.data, out.dtype, t, rows, cols, ldo);
          }
        },
        cuda::cast_2d(out.data, out.dtype, ldo, inp.data, inp.dtype, ldi, rows, cols));
    return;
  }
  check_float(op, "inp", inp, inp.shape);
  check_float(op, "out", out, inp.shape);
  const Device dev = common_device(op, {out, inp});
  if (inp.numel() == 0) return;
  FTUNE_DISPATCH(op, dev, cpu::cast(out.data, out.dtype, inp.data, inp.dtype, inp.numel()),
                 cuda::cast(out.data, out.dtype, inp.data, inp.dtype, inp.numel()));
}

}  // namespace ftune
