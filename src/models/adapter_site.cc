// One adapted linear module's forward and backward passes (see adapter_site.h).
#include "models/adapter_site.h"

#include "ops/cast.h"
#include "ops/dropout.h"
#include "ops/linear.h"
#include "ops/residual.h"

namespace ftune {
namespace {

// v itself when it is f32; else an fp32 copy of it in `stage` (mixed precision's adapter branch).
TensorView staged(const TensorView& v, const TensorView& stage) {
  if (v.dtype == DType::F32) return v;
  const TensorView f = stage.flat_range(0, v.numel()).reshape(v.shape);
  cast(f, v);
  return f;
}

// Where y's fp32 result is formed: y itself, or its stage (written whole, nothing read from y).
TensorView fp32_target(const TensorView& y, const TensorView& stage) {
  return y.dtype == DType::F32 ? y : stage.flat_range(0, y.numel()).reshape(y.shape);
}

// DoRA's norms n = ||W + s B A|| (rows), unless a recomputation keeps them.
void update_norms(const AdapterSiteRun& s, bool recompute) {
  if (!recompute)
    dora_norms(s.norm, s.weight_sq, s.weight, s.w.a, s.w.b, s.scale, s.norm_workspace);
}

// DoRA with adapter dropout (ops/lora.h): y = x W^T + b + s u B^T + (m/n - 1) z, with
// z = x_d W^T + s u B^T and u = x_d A^T.
void dora_dropout_forward(const AdapterSiteRun& s, TensorView y, TensorView x, TensorView xg,
                          bool y_has_base) {
  const int64_t N = x.dim(0), C = x.dim(1);
  if (!y_has_base) linear_forward(y, xg, s.gemm_weight, s.bias);
  const TensorView xd = s.dropout.scratch.flat_range(0, N * C).reshape({N, C});
  dropout_forward(xd, staged(x, s.stage_x), s.dropout.p, s.dropout.rng, s.dropout.rows);
  const TensorView u = s.u.prefix({N, s.w.a.dim(0)}), z = s.z.prefix({N, y.dim(1)});
  linear_forward(z, xd, s.weight, TensorView());  // the second frozen GEMM, fp32
  lora_forward(z, u, xd, s.w.a, s.w.b, s.scale);  // x_d is already dropped out
  const TensorView yf = staged(y, s.stage_y);
  lora_forward(yf, u, xd, s.w.a, s.w.b, s.scale);
  dora_dropout_output_forward(yf, z, s.w.magnitude, s.norm);
  if (yf.data != y.data) cast(y, yf);
}

}  // namespace

AdapterSiteRun adapter_run(const AdapterSet& ad, const AdapterSet* grads, int64_t layer, int kind) {
  AdapterSiteRun r;
  r.w = ad.at(layer, kind);
  if (grads && grads->any()) r.g = grads->at(layer, kind);
  r.dora = ad.dora;
  r.scale = ad.scale;
  if (ad.dora) {
    r.weight_sq = ad.weight_sq[layer][kind];
    r.norm = ad.norm[layer][kind];
    r.norm_workspace = ad.norm_workspace;
  }
  return r;
}

AdapterSiteRun adapter_site_run(const AdapterSet& ad, const AdapterSet* grads, int64_t layer,
                                int kind, TensorView weight, TensorView bias, TensorView u,
                                TensorView z, TensorView h) {
  AdapterSiteRun r = adapter_run(ad, grads, layer, kind);
  r.weight = r.gemm_weight = weight;
  r.bias = bias;
  r.u = u;
  r.z = z;
  r.h = h;
  return r;
}

void adapter_site_forward(const AdapterSiteRun& s, TensorView y, TensorView x, TensorView xg,
                          bool y_has_base, bool recompute) {
  const int64_t N = x.dim(0);
  const TensorView u = s.u.prefix({N, s.w.a.dim(0)});
  if (!s.dora) {
    if (!y_has_base) linear_forward(y, xg, s.gemm_weight, s.bias);
    // Mixed precision: the branch in fp32 on fp32 copies of 16-bit x and y.
    const TensorView xf = staged(x, s.stage_x), yf = staged(y, s.stage_y);
    lora_forward(yf, u, xf, s.w.a, s.w.b, s.scale, s.dropout);
    if (yf.data != y.data) cast(y, yf);
    return;
  }
  update_norms(s, recompute);
  if (s.dropout.p > 0.0f) return dora_dropout_forward(s, y, x, xg, y_has_base);
  // z = x W^T in its own fp32 buffer (no bias to strip) when it can.
  const TensorView z = s.z.prefix({N, y.dim(1)});
  if (y_has_base && y.dtype == DType::F32) {
    dora_strip_bias(z, y, s.bias);
  } else if (y_has_base) {
    cast(z, y);  // the 16-bit fused GEMM's block, widened, then its bias removed in place
    dora_strip_bias(z, z, s.bias);
  } else {
    linear_forward(z, xg, s.gemm_weight, TensorView());
  }
  lora_forward(z, u, staged(x, s.stage_x), s.w.a, s.w.b, s.scale);
  const TensorView yf = fp32_target(y, s.stage_y);
  dora_output_forward(yf, z, s.bias, s.w.magnitude, s.norm);
  if (yf.data != y.data) cast(y, yf);
}

void adapter_site_backward_scale(const AdapterSiteRun& s, TensorView dy) {
  if (!s.dora) return;
  // Mixed precision: in fp32 on a copy of the 16-bit dy, which then takes the scaled gradient back
  // in 16 bits (what the frozen GEMM and the LoRA branch read, as autocast would hand them).
  const TensorView dyf = staged(dy, s.stage_y), z = s.z.prefix(dy.shape);
  if (s.dropout.p > 0.0f) {
    dora_dropout_output_backward(s.g.magnitude, z, dyf, s.w.magnitude, s.norm);  // z := k
    return;
  }
  dora_output_backward(s.g.magnitude, dyf, z, s.w.magnitude, s.norm);
  if (dyf.data != dy.data) cast(dy, dyf);
}

void adapter_site_backward(const AdapterSiteRun& s, TensorView dy, TensorView x, TensorView dx) {
  const int64_t N = x.dim(0), C = x.dim(1), r = s.w.a.dim(0);
  const TensorView u = s.u.prefix({N, r}), h = s.h.prefix({N, r});
  // Mixed precision: fp32 copies of 16-bit dy, x and dx (dx accumulates, so it is copied in too).
  const TensorView dyf = staged(dy, s.stage_y), xf = staged(x, s.stage_x);
  const TensorView dxf = dx.defined() ? staged(dx, s.stage_dx) : dx;
  if (s.dora && s.dropout.p > 0.0f) {
    // z holds k = (m/n - 1) dout: dx += dropout'(k W), then the LoRA branch under k + dout.
    const TensorView k = s.z.prefix(dy.shape);
    if (dxf.defined()) {
      const TensorView e = s.dropout.scratch.flat_range(0, N * C).reshape({N, C});
      linear_backward(e, TensorView(), TensorView(), k, xf, s.weight);
      dropout_backward(e, e, s.dropout.p, s.dropout.rng, s.dropout.rows);
      residual_forward(dxf, dxf, e);
    }
    lora_backward(dxf, s.g.a, s.g.b, h, k, xf, u, s.w.a, s.w.b, s.scale,
                  /*accumulate_dinp=*/true, s.dropout);
  }
  lora_backward(dxf, s.g.a, s.g.b, h, dyf, xf, u, s.w.a, s.w.b, s.scale,
                /*accumulate_dinp=*/true, s.dropout);
  if (dxf.defined() && dxf.data != dx.data) cast(dx, dxf);
}

}  // namespace ftune
