// Tanh pooler: a linear layer (ops/linear) followed by tanh; checks and dispatch of the tanh part.
#include "ops/tanh_pooler.h"

#include "ops/dispatch.h"
#include "ops/linear.h"

namespace ftune {

void tanh_forward(TensorView x) {
  const char* op = "tanh_forward";
  check_contiguous(op, "x", x);
  FTUNE_DISPATCH(op, x.device, cpu::tanh_inplace(x.data_as<float>(), x.numel()),
                 cuda::tanh_inplace(x.data_as<float>(), x.numel()));
}

void tanh_backward(TensorView dpre, TensorView dout, TensorView out) {
  const char* op = "tanh_backward";
  check_f32(op, "out", out, out.shape);
  check_f32(op, "dout", dout, out.shape);
  check_f32(op, "dpre", dpre, out.shape);
  const Device dev = common_device(op, {dpre, dout, out});
  FTUNE_DISPATCH(op, dev,
                 cpu::tanh_backward(dpre.data_as<float>(), dout.data_as<float>(),
                                    out.data_as<float>(), out.numel()),
                 cuda::tanh_backward(dpre.data_as<float>(), dout.data_as<float>(),
                                     out.data_as<float>(), out.numel()));
}

void tanh_pooler_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) {
  linear_forward(out, inp, weight, bias);
  tanh_forward(out);
}

void tanh_pooler_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                          TensorView inp, TensorView out, TensorView weight, TensorView scratch) {
  tanh_backward(scratch, dout, out);
  linear_backward(dinp, dweight, dbias, scratch, inp, weight);
}

}  // namespace ftune
