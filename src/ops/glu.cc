// Gated activation: argument checks, dispatch and the HF activation names (ops/glu.h).
#include "ops/glu.h"

#include "ops/cast.h"
#include "ops/dispatch.h"

namespace ftune {

GluAct glu_act_from_hf(const std::string& name, const std::string& key) {
  if (name == "silu" || name == "swish") return GluAct::Silu;
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" || name == "gelu_fast")
    return GluAct::GeluTanh;
  if (name == "gelu") return GluAct::GeluErf;
  throw InputError(fmt::format(
      "{}: activation '{}' is not supported; expected silu, gelu_pytorch_tanh or gelu", key, name));
}

void glu_forward(TensorView out, TensorView gu, GluAct act) {
  const char* op = "glu_forward";
  if (gu.rank() != 2 || gu.dim(1) % 2 != 0)
    throw ShapeError(fmt::format("{}: gu must be (N, 2F), got {}", op, gu.describe()));
  const int64_t N = gu.dim(0), F = gu.dim(1) / 2;
  check_f32(op, "gu", gu, gu.shape);
  check_f32(op, "out", out, Shape{N, F});
  const Device dev = common_device(op, {out, gu});
  FTUNE_DISPATCH(op, dev, cpu::glu_forward(out.data_as<float>(), gu.data_as<float>(), N, F, act),
                 cuda::glu_forward(out.data_as<float>(), gu.data_as<float>(), N, F, act));
}

void glu_backward(TensorView dgu, TensorView gu, TensorView dout, GluAct act) {
  const char* op = "glu_backward";
  if (gu.rank() != 2 || gu.dim(1) % 2 != 0)
    throw ShapeError(fmt::format("{}: gu must be (N, 2F), got {}", op, gu.describe()));
  const int64_t N = gu.dim(0), F = gu.dim(1) / 2;
  check_f32(op, "gu", gu, gu.shape);
  check_f32(op, "dgu", dgu, gu.shape);
  check_f32(op, "dout", dout, Shape{N, F});
  const Device dev = common_device(op, {dgu, gu, dout});
  FTUNE_DISPATCH(op, dev,
                 cpu::glu_backward(dgu.data_as<float>(), gu.data_as<float>(),
                                   dout.data_as<float>(), N, F, act),
                 cuda::glu_backward(dgu.data_as<float>(), gu.data_as<float>(),
                                    dout.data_as<float>(), N, F, act));
}

namespace {
// An fp32 (rows, cols) view at the start of a staging buffer.
TensorView staging(const TensorView& buf, int64_t rows, int64_t cols) {
  return buf.flat_range(0, rows * cols).reshape({rows, cols});
}
}  // namespace

void glu_forward_staged(TensorView out, TensorView gu, GluAct act, TensorView stage0,
                        TensorView stage1) {
  if (gu.dtype == DType::F32) return glu_forward(out, gu, act);
  const int64_t N = gu.dim(0), F = gu.dim(1) / 2;
  const TensorView gu32 = staging(stage0, N, 2 * F), out32 = staging(stage1, N, F);
  cast(gu32, gu);
  glu_forward(out32, gu32, act);
  cast(out, out32);
}

void glu_backward_staged(TensorView dgu, TensorView gu, TensorView dout, GluAct act,
                         TensorView stage0, TensorView stage1) {
  if (gu.dtype == DType::F32) return glu_backward(dgu, gu, dout, act);
  const int64_t N = gu.dim(0), F = gu.dim(1) / 2;
  const TensorView gu32 = staging(stage0, N, 2 * F), dgu32 = staging(stage1, N, 2 * F);
  cast(gu32, gu);
  glu_backward(dgu32, gu32, dout, act);
  cast(dgu, dgu32);
}

}  // namespace ftune
