// GELU: argument checks, dispatch, and the mapping from HF activation names.
#include "ops/gelu.h"

#include "ops/cast.h"
#include "ops/dispatch.h"

namespace ftune {

GeluForm gelu_form_from_hf(const std::string& hidden_act, const std::string& key) {
  if (hidden_act == "gelu") return GeluForm::Erf;
  if (hidden_act == "gelu_new" || hidden_act == "gelu_fast" || hidden_act == "gelu_pytorch_tanh")
    return GeluForm::Tanh;
  throw InputError(
      fmt::format("{}: hidden_act '{}' is not supported; expected one of gelu, gelu_new, "
                  "gelu_fast, gelu_pytorch_tanh",
                  key, hidden_act));
}

namespace {

// Mixed precision: every tensor of one 16-bit type.
void check_same_16(const char* op, std::initializer_list<std::pair<const char*, TensorView>> args,
                   const Shape& shape) {
  const DType dtype = args.begin()->second.dtype;
  for (const auto& [name, v] : args) {
    check_float(op, name, v, shape);
    if (v.dtype != dtype || dtype == DType::F32)
      throw ShapeError(
          fmt::format("{}: {} has dtype {}; tensors must be all f32, all bf16 or all f16", op, name,
                      dtype_name(v.dtype)));
  }
}

}  // namespace

void gelu_forward(TensorView out, TensorView inp, GeluForm form) {
  const char* op = "gelu_forward";
  if (inp.dtype != DType::F32 || out.dtype != DType::F32) {
    check_same_16(op, {{"inp", inp}, {"out", out}}, inp.shape);
    const Device dev = common_device(op, {out, inp});
    const int64_t n = inp.numel();
    FTUNE_DISPATCH(
        op, dev,
        {
          int64_t ld;
          const float* x = cpu::stage_f32(inp.data, inp.dtype, 1, n, n, 0, &ld);
          float* y = cpu::staging(1, n);
          cpu::gelu_forward(y, x, n, form);
          cpu::store_f32(out.data, out.dtype, y, 1, n, n);
        },
        cuda::gelu_forward_16(out.data, inp.data, inp.dtype, n, form));
    return;
  }
  check_f32(op, "inp", inp, inp.shape);
  check_f32(op, "out", out, inp.shape);
  const Device dev = common_device(op, {out, inp});
  FTUNE_DISPATCH(op, dev,
                 cpu::gelu_forward(out.data_as<float>(), inp.data_as<float>(), inp.numel(), form),
                 cuda::gelu_forward(out.data_as<float>(), inp.data_as<float>(), inp.numel(), form));
}

void gelu_backward(TensorView dinp, TensorView inp, TensorView dout, GeluForm form) {
  const char* op = "gelu_backward";
  if (inp.dtype != DType::F32 || dout.dtype != DType::F32 || dinp.dtype != DType::F32) {
    check_same_16(op, {{"inp", inp}, {"dout", dout}, {"dinp", dinp}}, inp.shape);
    const Device dev = common_device(op, {dinp, inp, dout});
    const int64_t n = inp.numel();
    FTUNE_DISPATCH(
        op, dev,
        {
          int64_t ld;
          const float* x = cpu::stage_f32(inp.data, inp.dtype, 1, n, n, 0, &ld);
          const float* dy = cpu::stage_f32(dout.data, dout.dtype, 1, n, n, 1, &ld);
          float* dx = cpu::staging(2, n);
          cpu::gelu_backward(dx, x, dy, n, form);
          cpu::store_f32(dinp.data, dinp.dtype, dx, 1, n, n);
        },
        cuda::gelu_backward_16(dinp.data, inp.data, dout.data, inp.dtype, n, form));
    return;
  }
  check_f32(op, "inp", inp, inp.shape);
  check_f32(op, "dout", dout, inp.shape);
  check_f32(op, "dinp", dinp, inp.shape);
  const Device dev = common_device(op, {dinp, inp, dout});
  FTUNE_DISPATCH(op, dev,
                 cpu::gelu_backward(dinp.data_as<float>(), inp.data_as<float>(),
                                    dout.data_as<float>(), inp.numel(), form),
                 cuda::gelu_backward(dinp.data_as<float>(), inp.data_as<float>(),
                                     dout.data_as<float>(), inp.numel(), form));
}

}  // namespace ftune
