// GELU: argument checks, dispatch, and the mapping from HF activation names.
#include "ops/gelu.h"

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

void gelu_forward(TensorView out, TensorView inp, GeluForm form) {
  const char* op = "gelu_forward";
  check_f32(op, "inp", inp, inp.shape);
  check_f32(op, "out", out, inp.shape);
  const Device dev = common_device(op, {out, inp});
  FTUNE_DISPATCH(op, dev,
                 cpu::gelu_forward(out.data_as<float>(), inp.data_as<float>(), inp.numel(), form),
                 cuda::gelu_forward(out.data_as<float>(), inp.data_as<float>(), inp.numel(), form));
}

void gelu_backward(TensorView dinp, TensorView inp, TensorView dout, GeluForm form) {
  const char* op = "gelu_backward";
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
