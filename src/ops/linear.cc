// Linear layer: argument checks and dispatch.
#include "ops/linear.h"

#include <algorithm>

#include "ops/cast.h"
#include "ops/dispatch.h"

namespace ftune {
namespace {

// Mixed precision: the 16-bit operand type shared by weight, inp (and dout).
DType check_operands(const char* op, const TensorView& weight,
                     std::initializer_list<std::pair<const char*, TensorView>> operands) {
  if (weight.dtype != DType::BF16 && weight.dtype != DType::F16)
    throw ShapeError(fmt::format("{}: weight has dtype {}, expected f32, bf16 or f16", op,
                                 dtype_name(weight.dtype)));
  check_contiguous(op, "weight", weight);
  for (const auto& [name, v] : operands)
    if (v.dtype != weight.dtype)
      throw ShapeError(
          fmt::format("{}: {} has dtype {} but weight has {} (16-bit GEMM operands "
                      "share one type)",
                      op, name, dtype_name(v.dtype), dtype_name(weight.dtype)));
  return weight.dtype;
}

// out / dinp of a 16-bit GEMM: f32 or the operands' type.
void check_result(const char* op, const char* name, const TensorView& v, DType dtype) {
  if (v.defined() && v.dtype != DType::F32 && v.dtype != dtype)
    throw ShapeError(fmt::format("{}: {} has dtype {}, expected f32 or {}", op, name,
                                 dtype_name(v.dtype), dtype_name(dtype)));
}

// The CPU's emulation (ops/cast.h): 16-bit operands staged to fp32, the fp32 kernel, one
// rounding of a 16-bit result.
void cpu_forward_staged(const TensorView& out, int64_t ldo, const TensorView& inp, int64_t ldi,
                        const TensorView& weight, const TensorView& bias, int64_t N, int64_t C,
                        int64_t OC) {
  int64_t ldx, ldw, ldb;
  const float* x = cpu::stage_f32(inp.data, inp.dtype, N, C, ldi, 0, &ldx);
  const float* w = cpu::stage_f32(weight.data, weight.dtype, OC, C, C, 1, &ldw);
  const float* b =
      bias.defined() ? cpu::stage_f32(bias.data, bias.dtype, 1, OC, OC, 3, &ldb) : nullptr;
  if (out.dtype == DType::F32) {
    cpu::linear_forward(out.data_as<float>(), ldo, x, ldx, w, b, N, C, OC);
  } else {
    float* y = cpu::staging(2, N * OC);
    cpu::linear_forward(y, OC, x, ldx, w, b, N, C, OC);
    cpu::store_f32(out.data, out.dtype, y, N, OC, ldo);
  }
}

void cpu_backward_staged(const TensorView& dinp, int64_t lddi, float* dw, float* db,
                         const TensorView& dout, int64_t lddo, const TensorView& inp, int64_t ldi,
                         const TensorView& weight, int64_t N, int64_t C, int64_t OC,
                         bool accumulate_dinp) {
  int64_t ldy, ldx, ldw;
  const float* dy = cpu::stage_f32(dout.data, dout.dtype, N, OC, lddo, 0, &ldy);
  const float* x = cpu::stage_f32(inp.data, inp.dtype, N, C, ldi, 1, &ldx);
  const float* w = cpu::stage_f32(weight.data, weight.dtype, OC, C, C, 2, &ldw);
  float* dx = nullptr;
  int64_t lddx = lddi;
  if (dinp.defined() && dinp.dtype == DType::F32) {
    dx = dinp.data_as<float>();
  } else if (dinp.defined()) {
    // A 16-bit dinp that accumulates is read back in fp32 first (cuBLASLt's beta = 1 reads its
    // 16-bit C operand the same way).
    dx = cpu::staging(3, N * C);
    lddx = C;
    if (accumulate_dinp) {
      int64_t ld;
      const float* old = cpu::stage_f32(dinp.data, dinp.dtype, N, C, lddi, 4, &ld);
      std::copy(old, old + N * C, dx);
    }
  }
  cpu::linear_backward(dx, lddx, dw, db, dy, ldy, x, ldx, w, N, C, OC, accumulate_dinp);
  if (dinp.defined() && dinp.dtype != DType::F32)
    cpu::store_f32(dinp.data, dinp.dtype, dx, N, C, lddi);
}

void linear_forward_mixed(TensorView out, TensorView inp, TensorView weight, TensorView bias) {
  const char* op = "linear_forward";
  const int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.rank() == 2 ? inp.dim(0) : -1;
  const DType dt = check_operands(op, weight, {{"inp", inp}});
  const int64_t ldi = row_stride_float(op, "inp", inp, N, C);
  const int64_t ldo = row_stride_float(op, "out", out, N, OC);
  check_result(op, "out", out, dt);
  if (bias.defined()) {
    // f32, or the 16-bit output's own type (the bias's shadow).
    if (bias.dtype != DType::F32 && !(out.dtype == dt && bias.dtype == dt))
      throw ShapeError(fmt::format("{}: bias has dtype {}, expected f32 or the output's {}", op,
                                   dtype_name(bias.dtype), dtype_name(out.dtype)));
    check_float(op, "bias", bias, Shape{OC});
  }
  const Device dev = common_device(op, {out, inp, weight, bias});
  FTUNE_DISPATCH(op, dev, cpu_forward_staged(out, ldo, inp, ldi, weight, bias, N, C, OC),
                 cuda::linear_forward_mixed(out.data, out.dtype, ldo, inp.data, ldi, weight.data,
                                            dt, bias.defined() ? bias.data : nullptr,
                                            bias.defined() ? bias.dtype : DType::F32, N, C, OC));
}

void linear_backward_mixed(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                           TensorView inp, TensorView weight, bool accumulate_dinp) {
  const char* op = "linear_backward";
  const int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.rank() == 2 ? inp.dim(0) : -1;
  const DType dt = check_operands(op, weight, {{"inp", inp}, {"dout", dout}});
  const int64_t ldi = row_stride_float(op, "inp", inp, N, C);
  const int64_t lddo = row_stride_float(op, "dout", dout, N, OC);
  const int64_t lddi = dinp.defined() ? row_stride_float(op, "dinp", dinp, N, C) : C;
  check_result(op, "dinp", dinp, dt);
  if (dweight.defined()) check_f32(op, "dweight", dweight, Shape{OC, C});
  if (dbias.defined()) check_f32(op, "dbias", dbias, Shape{OC});
  float* dw = dweight.defined() ? dweight.data_as<float>() : nullptr;
  float* db = dbias.defined() ? dbias.data_as<float>() : nullptr;
  const Device dev = common_device(op, {dinp, dweight, dbias, dout, inp, weight});
  FTUNE_DISPATCH(op, dev,
                 cpu_backward_staged(dinp, lddi, dw, db, dout, lddo, inp, ldi, weight, N, C, OC,
                                     accumulate_dinp),
                 cuda::linear_backward_mixed(dinp.defined() ? dinp.data : nullptr, dinp.dtype, lddi,
                                             dw, db, dout.data, lddo, inp.data, ldi, weight.data,
                                             dt, N, C, OC, accumulate_dinp));
}

}  // namespace

void linear_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) {
  const char* op = "linear_forward";
  if (weight.rank() != 2)
    throw ShapeError("linear_forward: weight must be 2-D, got " + weight.describe());
  if (weight.dtype != DType::F32) return linear_forward_mixed(out, inp, weight, bias);
  const int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.rank() == 2 ? inp.dim(0) : -1;
  check_f32(op, "weight", weight, Shape{OC, C});
  const int64_t ldi = row_stride(op, "inp", inp, N, C);
  const int64_t ldo = row_stride(op, "out", out, N, OC);
  if (bias.defined()) check_f32(op, "bias", bias, Shape{OC});
  const Device dev = common_device(op, {out, inp, weight, bias});
  FTUNE_DISPATCH(op, dev,
                 cpu::linear_forward(out.data_as<float>(), ldo, inp.data_as<float>(), ldi,
                                     weight.data_as<float>(),
                                     bias.defined() ? bias.data_as<float>() : nullptr, N, C, OC),
                 cuda::linear_forward(out.data_as<float>(), ldo, inp.data_as<float>(), ldi,
                                      weight.data_as<float>(),
                                      bias.defined() ? bias.data_as<float>() : nullptr, N, C, OC));
}

void linear_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                     TensorView inp, TensorView weight, bool accumulate_dinp) {
  const char* op = "linear_backward";
  if (weight.rank() != 2)
    throw ShapeError("linear_backward: weight must be 2-D, got " + weight.describe());
  if (weight.dtype != DType::F32)
    return linear_backward_mixed(dinp, dweight, dbias, dout, inp, weight, accumulate_dinp);
  const int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.rank() == 2 ? inp.dim(0) : -1;
  check_f32(op, "weight", weight, Shape{OC, C});
  const int64_t ldi = row_stride(op, "inp", inp, N, C);
  const int64_t lddo = row_stride(op, "dout", dout, N, OC);
  const int64_t lddi = dinp.defined() ? row_stride(op, "dinp", dinp, N, C) : C;
  if (dweight.defined()) check_f32(op, "dweight", dweight, Shape{OC, C});
  if (dbias.defined()) check_f32(op, "dbias", dbias, Shape{OC});
  const Device dev = common_device(op, {dinp, dweight, dbias, dout, inp, weight});
  FTUNE_DISPATCH(op, dev,
                 cpu::linear_backward(dinp.defined() ? dinp.data_as<float>() : nullptr, lddi,
                                      dweight.defined() ? dweight.data_as<float>() : nullptr,
                                      dbias.defined() ? dbias.data_as<float>() : nullptr,
                                      dout.data_as<float>(), lddo, inp.data_as<float>(), ldi,
                                      weight.data_as<float>(), N, C, OC, accumulate_dinp),
                 cuda::linear_backward(dinp.defined() ? dinp.data_as<float>() : nullptr, lddi,
                                       dweight.defined() ? dweight.data_as<float>() : nullptr,
                                       dbias.defined() ? dbias.data_as<float>() : nullptr,
                                       dout.data_as<float>(), lddo, inp.data_as<float>(), ldi,
                                       weight.data_as<float>(), N, C, OC, accumulate_dinp));
}

}  // namespace ftune
