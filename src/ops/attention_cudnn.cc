// cuDNN flash attention behind the attention op (see attention_cudnn.h).
#include "ops/attention_cudnn.h"

#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/gpu_paths.h"
#include "core/op_profile.h"
#ifdef FTUNE_WITH_CUDA
#include "cuda/cuda_device.h"
#include "cuda/cudnn_attention.h"
#include "cuda/cuda_libraries.h"
#endif

namespace ftune {
namespace {

constexpr size_t align16(size_t n) { return (n + 15) / 16 * 16; }

// Where stats, seq_lens, rng and the ragged offsets sit in the probs buffer (byte offsets), and the
// bytes they need.
struct ProbsLayout {
  size_t seq_lens = 0, rng = 0, ragged = 0, end = 0;
};
ProbsLayout probs_layout(const CudnnAttentionDims& d) {
  ProbsLayout l;
  l.seq_lens = align16(static_cast<size_t>(d.B * d.H * d.T) * sizeof(float));
  l.rng = align16(l.seq_lens + static_cast<size_t>(2 * d.B) * sizeof(int32_t));
  l.ragged = l.rng + 2 * sizeof(int64_t);
  l.end = l.ragged + static_cast<size_t>(2 * (d.B + 1)) * sizeof(int64_t);
  return l;
}

#ifdef FTUNE_WITH_CUDA
// Whether this call (its kernel cuDNN) runs through cuDNN; the same answer for a layer's forward
// and backward (and a recomputation): it depends only on the shape, the buffers and cuDNN's
// cached build. Refused: ftune's kernel when the buffer holds the probabilities (one warning per
// shape), else a ShapeError naming the shape and training.attention: ftune.
bool qualifies(const TensorView& qkv, const TensorView& probs, const TensorView& workspace,
               const CudnnAttentionDims& d, float dropout_p, cuda::SdpaShape* shape) {
  shape->B = d.B;
  shape->T = d.T;
  shape->H = d.H;
  shape->D = d.D;
  shape->dtype = qkv.dtype == DType::BF16 ? cuda::SdpaDtype::BF16 : cuda::SdpaDtype::F16;
  shape->dropout = dropout_p;
  shape->ragged = d.cu_seqlens != nullptr;
  shape->tokens = shape->ragged ? d.tokens : d.B * d.T;
  std::string why;
  if (!qkv.defined()) {
    why = "cuDNN's graphs take BERT's fused-QKV layout (bidirectional, equal heads, no window or "
          "soft-cap), not this call";
  } else if (qkv.device.is_cpu() || (qkv.dtype != DType::BF16 && qkv.dtype != DType::F16)) {
    why = fmt::format("cuDNN runs 16-bit attention on a GPU, this is {} on {}",
                      dtype_name(qkv.dtype), device_name(qkv.device));
  } else if (!cuda::cudnn_sdpa_compiled()) {
    why = "this build has no cuDNN attention (" + cuda::cudnn_sdpa_build_note() + ")";
  } else if (probs_layout(d).end > static_cast<size_t>(probs.numel()) * sizeof(float)) {
    why = fmt::format("the attention buffer holds {} floats, cuDNN's state needs {}", probs.numel(),
                      cudnn_attention_state_floats(d.B, d.H, d.T));
  } else if (cuda::cudnn_sdpa_supported(*shape, &why)) {
    const size_t need = cuda::cudnn_sdpa_workspace_bytes(*shape);
    const size_t have = static_cast<size_t>(workspace.numel()) * sizeof(float);
    if (need <= have) return true;
    why = fmt::format("it needs {} bytes of workspace, the plan has {}", need, have);
  }
  // The run (or the process) asked for cuDNN and it refused: an error where cuDNN is required.
  cuda::fail_if_cudnn_required(
      fmt::format("cuDNN attention refused B={} T={} H={} D={}", d.B, d.T, d.H, d.D), why);
  const int64_t probs_floats = (d.cu_seqlens ? d.tokens : d.B * d.T) * d.H * d.T;
  if (probs.numel() < probs_floats)
    throw ShapeError(fmt::format(
        "attention B={} T={} H={} D={}: cuDNN cannot run it ({}), and the run planned only "
        "cuDNN's state for attention ({} floats per layer; ftune's kernel needs {} for this "
        "call's probabilities); set training.attention: ftune",
        d.B, d.T, d.H, d.D, why, probs.numel(), probs_floats));
  static std::mutex mu;
  static std::set<std::tuple<int64_t, int64_t, int64_t, int64_t, int, float, bool>> warned;
  const auto key = std::make_tuple(d.B, d.T, d.H, d.D, static_cast<int>(shape->dtype), dropout_p,
                                   shape->ragged);
  std::lock_guard<std::mutex> lock(mu);
  count_gpu_path(GpuPath::AttentionCudnnRefused);
  if (warned.insert(key).second)
    spdlog::warn("attention B={} T={} H={} D={}{}: cuDNN cannot run it ({}); ftune's kernel runs it",
                 d.B, d.T, d.H, d.D, shape->ragged ? " (packed rows)" : "", why);
  return false;
}

// stats, seq_lens, rng and (packed rows) the ragged offsets in the probs buffer, written for this
// call (the key mask or cu_seqlens, and the dropout key), on the compute stream.
struct CudnnBuffers {
  float* stats;
  int32_t* seq_lens;
  int64_t* rng;
  int64_t* ragged;  // null when padded
};
CudnnBuffers prepare(const TensorView& probs, const TensorView& key_mask,
                     const CudnnAttentionDims& d, RngKey rng) {
  char* base = static_cast<char*>(probs.data);
  const ProbsLayout l = probs_layout(d);
  CudnnBuffers b{reinterpret_cast<float*>(base), reinterpret_cast<int32_t*>(base + l.seq_lens),
                 reinterpret_cast<int64_t*>(base + l.rng), nullptr};
  if (d.cu_seqlens) {
    b.ragged = reinterpret_cast<int64_t*>(base + l.ragged);
    cuda::sdpa_ragged_from_cu(b.seq_lens, b.ragged, d.cu_seqlens, d.B, d.H * d.D);
  } else {
    cuda::sdpa_seq_lens_from_mask(b.seq_lens, key_mask.data_as<int32_t>(), d.B, d.T);
  }
  cuda::sdpa_write_rng(b.rng, rng, d.row0);
  return b;
}
#endif

}  // namespace

bool uses_cudnn_attention(AttentionKernel kernel, Device device, DType compute) {
  return kernel == AttentionKernel::Cudnn && !device.is_cpu() && compute != DType::F32;
}

int64_t cudnn_attention_state_floats(int64_t B, int64_t H, int64_t T) {
  const CudnnAttentionDims d{B, T, H, 1};
  return static_cast<int64_t>(probs_layout(d).end / sizeof(float));
}

const char* attention_memory_note(bool cudnn_state) {
  return cudnn_state
             ? "cuDNN flash attention: softmax statistics (B, H, T) fp32, sequence lengths and "
               "dropout seed per layer slot; the (B, H, T, T) probabilities are not stored"
             : "attention probabilities (B, H, T, T) fp32 saved for backward, per layer slot";
}

std::string cudnn_attention_probe(Device device, int64_t B, int64_t T, int64_t H, int64_t D,
                                  DType dtype, float dropout_p, bool packed) {
  if (dtype != DType::BF16 && dtype != DType::F16)
    return fmt::format("cuDNN's flash attention is 16-bit only, not {}", dtype_name(dtype));
#ifdef FTUNE_WITH_CUDA
  if (!cuda::cudnn_sdpa_compiled())
    return "this build has no cuDNN attention (" + cuda::cudnn_sdpa_build_note() + ")";
  if (cuda_device_count() == 0) return "no CUDA device is visible";
  if (device.is_cpu() || device.index >= cuda_device_count())
    return fmt::format("{} is not a visible CUDA device", device_name(device));
  cuda::use_device(device);  // the graphs are built on, and cached for, the current device
  const size_t have =
      static_cast<size_t>(cudnn_attention_workspace_floats(B, H, T, D)) * sizeof(float);
  for (const float p : {dropout_p, 0.0f}) {
    const cuda::SdpaShape shape{
        B,      T, H, D, dtype == DType::BF16 ? cuda::SdpaDtype::BF16 : cuda::SdpaDtype::F16, p,
        packed, B * T};
    std::string why;
    if (!cuda::cudnn_sdpa_supported(shape, &why)) return why;
    const size_t need = cuda::cudnn_sdpa_workspace_bytes(shape);
    if (need > have)
      return fmt::format("dropout {}: it needs {} bytes of workspace, the plan reserves {}", p,
                         need, have);
  }
  return "";
#else
  (void)device, (void)B, (void)T, (void)H, (void)D, (void)dropout_p, (void)packed;
  return "this build has no CUDA";
#endif
}

int64_t cudnn_attention_workspace_floats(int64_t B, int64_t H, int64_t T, int64_t D) {
  return B * H * T * D + (int64_t{16} << 20) / static_cast<int64_t>(sizeof(float));
}

bool try_cudnn_attention_forward(TensorView out, TensorView probs, TensorView qkv,
                                 TensorView key_mask, const CudnnAttentionDims& d,
                                 float dropout_p, RngKey rng, TensorView workspace) {
#ifdef FTUNE_WITH_CUDA
  cuda::SdpaShape shape;
  if (!qualifies(qkv, probs, workspace, d, dropout_p, &shape)) return false;
  count_gpu_path(GpuPath::AttentionCudnn);
  if (shape.ragged) count_gpu_path(GpuPath::AttentionPackedCudnn);
  const CudnnBuffers b = prepare(probs, key_mask, d, rng);
  const profile::OpScope scope("cudnn_sdpa", qkv.device);
  cuda::cudnn_sdpa_forward(out.data, b.stats, qkv.data, b.seq_lens, b.ragged, b.rng, shape,
                           workspace.data, static_cast<size_t>(workspace.numel()) * sizeof(float));
  return true;
#else
  (void)out, (void)probs, (void)qkv, (void)key_mask, (void)d, (void)dropout_p, (void)rng,
      (void)workspace;
  return false;
#endif
}

bool try_cudnn_attention_backward(TensorView dqkv, TensorView dout, TensorView qkv,
                                  TensorView out, TensorView probs, TensorView key_mask,
                                  const CudnnAttentionDims& d, float dropout_p, RngKey rng,
                                  TensorView workspace) {
#ifdef FTUNE_WITH_CUDA
  cuda::SdpaShape shape;
  if (!qualifies(qkv, probs, workspace, d, dropout_p, &shape)) return false;
  count_gpu_path(GpuPath::AttentionCudnn);
  if (shape.ragged) count_gpu_path(GpuPath::AttentionPackedCudnn);
  if (!out.defined())
    throw ShapeError(
        "attention_backward: cuDNN attention needs the forward pass's output (the `out` "
        "argument); pass it, or use training.attention: ftune");
  const CudnnBuffers b = prepare(probs, key_mask, d, rng);
  const profile::OpScope scope("cudnn_sdpa", qkv.device);
  cuda::cudnn_sdpa_backward(dqkv.data, dout.data, qkv.data, out.data, b.stats, b.seq_lens,
                            b.ragged, b.rng, shape, workspace.data,
                            static_cast<size_t>(workspace.numel()) * sizeof(float));
  return true;
#else
  (void)dqkv, (void)dout, (void)qkv, (void)out, (void)probs, (void)key_mask, (void)d,
      (void)dropout_p, (void)rng, (void)workspace;
  return false;
#endif
}

}  // namespace ftune
