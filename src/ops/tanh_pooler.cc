// Tanh pooler: a linear layer (ops/linear) followed by tanh; checks and dispatch of the tanh part.
#include "ops/tanh_pooler.h"

#include "ops/dispatch.h"
#include "ops/linear.h"

namespace ftune {

void tanh_pooler_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) {
  const char* op = "tanh_pooler_forward";
  linear_forward(out, inp, weight, bias);
  check_contiguous(op, "out", out);
  FTUNE_DISPATCH(op, out.device, cpu::tanh_inplace(out.data_as<float>(), out.numel()),
                 cuda::tanh_inplace(out.data_as<float>(), out.numel()));
}

void tanh_pooler_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                          TensorView inp, TensorView out, TensorView weight, TensorView scratch) {
  const char* op = "tanh_pooler_backward";
  check_f32(op, "out", out, out.shape);
  check_f32(op, "dout", dout, out.shape);
  check_f32(op, "scratch", scratch, out.shape);
  const Device dev = common_device(op, {dout, out, scratch});
  FTUNE_DISPATCH(op, dev,
                 cpu::tanh_backward(scratch.data_as<float>(), dout.data_as<float>(),
                                    out.data_as<float>(), out.numel()),
                 cuda::tanh_backward(scratch.data_as<float>(), dout.data_as<float>(),
                                     out.data_as<float>(), out.numel()));
  linear_backward(dinp, dweight, dbias, scratch, inp, weight);
}

}  // namespace ftune
