// Layer norm: argument checks and dispatch.
#include "ops/layer_norm.h"

#include <initializer_list>
#include <utility>

#include "ops/dispatch.h"

namespace ftune {
namespace {

// Checks the per-row statistics and the named per-channel vectors (weight, bias or their
// gradients) against the input's (N, C).
void check_stats(const char* op, const TensorView& inp, const TensorView& mean,
                 const TensorView& rstd,
                 std::initializer_list<std::pair<const char*, const TensorView*>> channels) {
  if (inp.rank() < 1) throw ShapeError(fmt::format("{}: input must have rank >= 1", op));
  const int64_t C = inp.dim(-1), N = inp.numel() / std::max<int64_t>(C, 1);
  for (const auto& [name, view] : channels) check_f32(op, name, *view, Shape{C});
  check_f32(op, "mean", mean, Shape{N});
  check_f32(op, "rstd", rstd, Shape{N});
}

// The data of an optional vector (a LayerNorm without bias): null when undefined.
const float* optional_f32(const TensorView& v) {
  return v.defined() ? v.data_as<float>() : nullptr;
}

}  // namespace

void layer_norm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp,
                        TensorView weight, TensorView bias, float eps, TensorView out_h) {
  const char* op = "layer_norm_forward";
  check_f32(op, "inp", inp, inp.shape);
  check_f32(op, "out", out, inp.shape);
  if (bias.defined())
    check_stats(op, inp, mean, rstd, {{"weight", &weight}, {"bias", &bias}});
  else
    check_stats(op, inp, mean, rstd, {{"weight", &weight}});
  bf16_t* out_bf16 = nullptr;
  f16_t* out_f16 = nullptr;
  if (out_h.defined()) {
    if ((out_h.dtype != DType::BF16 && out_h.dtype != DType::F16) || out_h.shape != inp.shape ||
        !out_h.is_contiguous())
      throw ShapeError(fmt::format("{}: out_h must be a contiguous bf16 or f16 tensor of shape {}, "
                                   "got {}",
                                   op, inp.describe(), out_h.describe()));
    if (out_h.dtype == DType::BF16)
      out_bf16 = out_h.data_as<bf16_t>();
    else
      out_f16 = out_h.data_as<f16_t>();
  }
  const int64_t C = inp.dim(-1), N = inp.numel() / std::max<int64_t>(C, 1);
  const Device dev = out_h.defined()
                         ? common_device(op, {out, mean, rstd, inp, weight, bias, out_h})
                         : common_device(op, {out, mean, rstd, inp, weight, bias});
  FTUNE_DISPATCH(
      op, dev,
      cpu::layer_norm_forward(out.data_as<float>(), mean.data_as<float>(), rstd.data_as<float>(),
                              inp.data_as<float>(), nullptr, nullptr, nullptr,
                              weight.data_as<float>(), optional_f32(bias), N, C, eps, out_bf16,
                              out_f16),
      cuda::layer_norm_forward(out.data_as<float>(), mean.data_as<float>(), rstd.data_as<float>(),
                               inp.data_as<float>(), nullptr, nullptr, nullptr,
                               weight.data_as<float>(), optional_f32(bias), N, C, eps,
                               out_bf16, out_f16));
}

void add_layer_norm_forward(TensorView out, TensorView sum, TensorView mean, TensorView rstd,
                            TensorView a, TensorView b, TensorView weight, TensorView bias,
                            float eps) {
  const char* op = "add_layer_norm_forward";
  check_f32(op, "a", a, a.shape);
  check_f32(op, "b", b, a.shape);
  check_f32(op, "sum", sum, a.shape);
  check_f32(op, "out", out, a.shape);
  check_stats(op, a, mean, rstd, {{"weight", &weight}, {"bias", &bias}});
  const int64_t C = a.dim(-1), N = a.numel() / std::max<int64_t>(C, 1);
  const Device dev = common_device(op, {out, sum, mean, rstd, a, b, weight, bias});
  FTUNE_DISPATCH(
      op, dev,
      cpu::layer_norm_forward(out.data_as<float>(), mean.data_as<float>(), rstd.data_as<float>(),
                              nullptr, a.data_as<float>(), b.data_as<float>(), sum.data_as<float>(),
                              weight.data_as<float>(), bias.data_as<float>(), N, C, eps),
      cuda::layer_norm_forward(out.data_as<float>(), mean.data_as<float>(), rstd.data_as<float>(),
                               nullptr, a.data_as<float>(), b.data_as<float>(),
                               sum.data_as<float>(), weight.data_as<float>(), bias.data_as<float>(),
                               N, C, eps));
}

void layer_norm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                         TensorView inp, TensorView weight, TensorView mean, TensorView rstd) {
  const char* op = "layer_norm_backward";
  check_f32(op, "inp", inp, inp.shape);
  check_f32(op, "dout", dout, inp.shape);
  check_f32(op, "dinp", dinp, inp.shape);
  // Frozen LayerNorms (adapters) pass undefined dweight and dbias: only dinp is computed. A
  // LayerNorm without bias (ModernBERT's norm_bias false) passes dweight alone.
  if (dbias.defined() && !dweight.defined())
    throw ShapeError(fmt::format("{}: dbias without dweight", op));
  if (dbias.defined())
    check_stats(op, inp, mean, rstd,
                {{"weight", &weight}, {"dweight", &dweight}, {"dbias", &dbias}});
  else if (dweight.defined())
    check_stats(op, inp, mean, rstd, {{"weight", &weight}, {"dweight", &dweight}});
  else
    check_stats(op, inp, mean, rstd, {{"weight", &weight}});
  const int64_t C = inp.dim(-1), N = inp.numel() / std::max<int64_t>(C, 1);
  const Device dev = common_device(op, {dinp, dweight, dbias, dout, inp, weight, mean, rstd});
  FTUNE_DISPATCH(op, dev,
                 cpu::layer_norm_backward(
                     dinp.data_as<float>(), dweight.defined() ? dweight.data_as<float>() : nullptr,
                     dbias.defined() ? dbias.data_as<float>() : nullptr, dout.data_as<float>(),
                     inp.data_as<float>(), weight.data_as<float>(), mean.data_as<float>(),
                     rstd.data_as<float>(), N, C),
                 cuda::layer_norm_backward(
                     dinp.data_as<float>(), dweight.defined() ? dweight.data_as<float>() : nullptr,
                     dbias.defined() ? dbias.data_as<float>() : nullptr, dout.data_as<float>(),
                     inp.data_as<float>(), weight.data_as<float>(), mean.data_as<float>(),
                     rstd.data_as<float>(), N, C));
}

}  // namespace ftune
