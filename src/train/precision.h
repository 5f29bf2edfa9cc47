// Training precision (`training.precision`): fp32, or mixed precision with autocast semantics —
// fp32 master weights and optimizer state, bf16 (or f16) GEMMs and attention with fp32
// accumulation, fp32 LayerNorms, softmax, loss and parameter gradients (models/bert/encoder.h).
//   auto: bf16 on a CUDA device that has bf16 tensor cores (sm_80+), fp16 on an older GPU, fp32 on
//         the CPU (which has no 16-bit arithmetic: bf16 / fp16 there are an emulation,
//         ops/cast.h). LoRA and DoRA adapters run in every precision: their branches (and DoRA's
//         norms and magnitude scaling) compute in fp32 on fp32 copies of their 16-bit inputs,
//         the frozen GEMM in 16 bits (models/bert/encoder.cc).
//   fp16: the same autocast semantics with f16 storage, plus dynamic loss scaling
//         (optim/loss_scaler.h) against f16's narrow exponent range.
#pragma once

#include <string>
#include <string_view>

#include "core/device.h"
#include "core/dtype.h"
#include "ops/attention_cudnn.h"
#include "train/config_choices.h"

namespace ftune {

enum class Precision : uint8_t { FP32, BF16, FP16 };

std::string_view precision_name(Precision p);  // "fp32", "bf16", "fp16"
DType compute_dtype(Precision p);              // F32, BF16, F16

struct ResolvedPrecision {
  Precision precision = Precision::FP32;
  std::string reason;  // why (for the run log), e.g. "auto: the CPU computes in fp32"
};

// Resolves training.precision (auto, fp32, bf16 or fp16) for a run on `device`. Throws InputError
// naming the key for bf16 on a GPU without it.
ResolvedPrecision resolve_precision(PrecisionSetting value, Device device);
// The same for a device whose bf16 support is given rather than queried (`ftune doctor`'s rules,
// testable with made-up devices).
ResolvedPrecision resolve_precision(PrecisionSetting value, Device device, bool device_bf16);

// training.tf32 (auto | on | off): whether the GEMMs that stay in fp32 use TF32 tensor cores
// (~1e-3 relative error, PyTorch's allow_tf32). Never on the CPU (no TF32 there). auto: on with
// bf16 / fp16 precision (the few fp32 GEMMs left, e.g. the head and LoRA branches, need no more
// than bf16's accuracy), off in fp32 precision, which is the mode for parity with the CPU.
struct ResolvedTf32 {
  bool on = false;
  std::string reason;
};
ResolvedTf32 resolve_tf32(Switch value, Device device, Precision precision);
// The same from the key's word (auto, on or off; else InputError naming training.tf32).
ResolvedTf32 resolve_tf32(std::string_view value, Device device, Precision precision);

// training.attention (auto | ftune | cudnn): the kernel of 16-bit attention on a GPU
// (ops/attention_cudnn.h). auto: cuDNN's flash attention with bf16 / fp16 on a GPU when this
// build has it, else ftune's fused kernel (always on the CPU and in fp32, which cuDNN's flash
// attention does not take). cuDNN draws its own dropout masks: training.attention ftune keeps
// the CPU's. Throws InputError naming the key when cudnn is asked for where it cannot run.
struct ResolvedAttention {
  AttentionKernel kernel = AttentionKernel::Ftune;
  std::string reason;
};
ResolvedAttention resolve_attention(AttentionSetting value, Device device, Precision precision,
                                    bool cudnn_built);
ResolvedAttention resolve_attention(AttentionSetting value, Device device,
                                    Precision precision);  // cudnn_built: this build's
// The same from the key's word (auto, ftune or cudnn; else InputError naming training.attention).
ResolvedAttention resolve_attention(std::string_view value, Device device, Precision precision,
                                    bool cudnn_built);
ResolvedAttention resolve_attention(std::string_view value, Device device, Precision precision);

}  // namespace ftune
