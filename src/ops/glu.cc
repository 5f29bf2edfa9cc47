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

namespace {

// gu (N, 2F) of f32, bf16 or f16; returns F.
int64_t check_gu(const char* op, const TensorView& gu) {
  if (gu.rank() != 2 || gu.dim(1) % 2 != 0)
    throw ShapeError(fmt::format("{}: gu must be (N, 2F), got {}", op, gu.describe()));
  check_float(op, "gu", gu, gu.shape);
  return gu.dim(1) / 2;
}

// A float tensor of `shape` whose type is gu's, or (`f32_too`) f32.
void check_like_gu(const char* op, const char* arg, const TensorView& v, const Shape& shape,
                   DType gu_type, bool f32_too) {
  check_float(op, arg, v, shape);
  if (v.dtype != gu_type && !(f32_too && v.dtype == DType::F32))
    throw ShapeError(fmt::format("{}: {} has dtype {}; it must be gu's {}{}", op, arg,
                                 dtype_name(v.dtype), dtype_name(gu_type),
                                 f32_too ? " or f32" : ""));
}

}  // namespace

void glu_forward(TensorView out, TensorView gu, GluAct act) {
  const char* op = "glu_forward";
  const int64_t F = check_gu(op, gu), N = gu.dim(0);
  check_like_gu(op, "out", out, Shape{N, F}, gu.dtype, false);
  const Device dev = common_device(op, {out, gu});
  if (gu.dtype != DType::F32) {
    FTUNE_DISPATCH(
        op, dev,
        {
          int64_t ld;
          const float* g = cpu::stage_f32(gu.data, gu.dtype, N, 2 * F, 2 * F, 0, &ld);
          float* o = cpu::staging(1, N * F);
          cpu::glu_forward(o, g, N, F, act);
          cpu::store_f32(out.data, out.dtype, o, N, F, F);
        },
        cuda::glu_forward_16(out.data, gu.data, gu.dtype, N, F, act));
    return;
  }
  FTUNE_DISPATCH(op, dev, cpu::glu_forward(out.data_as<float>(), gu.data_as<float>(), N, F, act),
                 cuda::glu_forward(out.data_as<float>(), gu.data_as<float>(), N, F, act));
}

void glu_backward(TensorView dgu, TensorView gu, TensorView dout, GluAct act) {
  const char* op = "glu_backward";
  const int64_t F = check_gu(op, gu), N = gu.dim(0);
  check_like_gu(op, "dgu", dgu, gu.shape, gu.dtype, false);
  check_like_gu(op, "dout", dout, Shape{N, F}, gu.dtype, true);
  const Device dev = common_device(op, {dgu, gu, dout});
  if (gu.dtype != DType::F32) {
    FTUNE_DISPATCH(
        op, dev,
        {
          int64_t ld;
          const float* g = cpu::stage_f32(gu.data, gu.dtype, N, 2 * F, 2 * F, 0, &ld);
          const float* dy = cpu::stage_f32(dout.data, dout.dtype, N, F, F, 1, &ld);
          float* dg = cpu::staging(2, N * 2 * F);
          cpu::glu_backward(dg, g, dy, N, F, act);
          cpu::store_f32(dgu.data, dgu.dtype, dg, N, 2 * F, 2 * F);
        },
        cuda::glu_backward_16(dgu.data, gu.data, dout.data, gu.dtype, dout.dtype, N, F, act));
    return;
  }
  FTUNE_DISPATCH(op, dev,
                 cpu::glu_backward(dgu.data_as<float>(), gu.data_as<float>(),
                                   dout.data_as<float>(), N, F, act),
                 cuda::glu_backward(dgu.data_as<float>(), gu.data_as<float>(),
                                    dout.data_as<float>(), N, F, act));
}

}  // namespace ftune
