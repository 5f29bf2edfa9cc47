// Training precision: names and the resolution of training.precision (see precision.h).
#include "train/precision.h"

#include <fmt/format.h>

#include "core/error.h"
#include "cuda/cuda_libraries.h"
#ifdef FTUNE_WITH_CUDA
#include "cuda/cuda_device.h"
#endif

namespace ftune {

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::FP32:
      return "fp32";
    case Precision::BF16:
      return "bf16";
    case Precision::FP16:
      return "fp16";
  }
  return "?";
}

DType compute_dtype(Precision p) {
  switch (p) {
    case Precision::FP32:
      return DType::F32;
    case Precision::BF16:
      return DType::BF16;
    case Precision::FP16:
      return DType::F16;
  }
  return DType::F32;
}

namespace {

// A GPU that is not visible here (`ftune plan --memory` for another machine) is assumed to be
// sm_80 or later.
bool device_has_bf16(Device device) {
  if (device.is_cpu()) return false;
#ifdef FTUNE_WITH_CUDA
  if (device.index >= cuda_device_count()) return true;
  return cuda::device_capabilities(device).bf16;
#else
  return true;
#endif
}

}  // namespace

ResolvedPrecision resolve_precision(PrecisionSetting value, Device device) {
  return resolve_precision(value, device, device_has_bf16(device));
}

ResolvedPrecision resolve_precision(PrecisionSetting value, Device device, bool device_bf16) {
  const char* key = "training.precision";
  if (value == PrecisionSetting::FP32) return {Precision::FP32, "fp32 as configured"};
  if (value == PrecisionSetting::FP16) {
    if (device.is_cpu())
      return {
          Precision::FP16,
          "fp16 with dynamic loss scaling as configured; the CPU has no fp16 arithmetic, so this "
          "is an emulation (fp16 storage, fp32 compute) and slower than fp32"};
    return {Precision::FP16, "fp16 with dynamic loss scaling as configured"};
  }
  if (value == PrecisionSetting::BF16) {
    if (device.is_cpu())
      return {Precision::BF16,
              "bf16 as configured; the CPU has no bf16 arithmetic, so this is an emulation "
              "(bf16 storage, fp32 compute) and slower than fp32"};
    if (!device_bf16)
      throw InputError(fmt::format(
          "key '{}' is 'bf16', but {} has no bf16 support (needs compute capability 8.0 or "
          "later); use {}=fp32 or auto",
          key, device_name(device), key));
    return {Precision::BF16, "bf16 as configured"};
  }
  if (device.is_cpu()) return {Precision::FP32, "auto: the CPU computes in fp32"};
  if (device_bf16)
    return {Precision::BF16, fmt::format("auto: {} has bf16 tensor cores", device_name(device))};
  return {Precision::FP16,
          fmt::format("auto: {} has no bf16: fp16 with dynamic loss scaling", device_name(device))};
}

ResolvedTf32 resolve_tf32(std::string_view value, Device device, Precision precision) {
  return resolve_tf32(parse_choice<Switch>(value, "key 'training.tf32'"), device, precision);
}

ResolvedTf32 resolve_tf32(Switch value, Device device, Precision precision) {
  if (device.is_cpu()) return {false, "the CPU has no TF32"};
  if (value == Switch::On) return {true, "training.tf32 on"};
  if (value == Switch::Off) return {false, "training.tf32 off"};
  if (precision == Precision::FP32)
    return {false, "auto: fp32 precision keeps fp32 GEMMs exact (parity with the CPU)"};
  return {true, "auto: " + std::string(precision_name(precision)) +
                    " precision; the remaining fp32 GEMMs use TF32"};
}

ResolvedAttention resolve_attention(std::string_view value, Device device, Precision precision,
                                    bool cudnn_built) {
  return resolve_attention(parse_choice<AttentionSetting>(value, "key 'training.attention'"),
                           device, precision, cudnn_built);
}

ResolvedAttention resolve_attention(std::string_view value, Device device, Precision precision) {
  return resolve_attention(value, device, precision, cuda::cudnn_sdpa_compiled());
}

ResolvedAttention resolve_attention(AttentionSetting value, Device device, Precision precision,
                                    bool cudnn_built) {
  const char* key = "training.attention";
  if (value == AttentionSetting::Ftune) return {AttentionKernel::Ftune, "training.attention ftune"};
  const bool is16 = precision != Precision::FP32;
  if (value == AttentionSetting::Cudnn) {
    if (device.is_cpu())
      throw InputError(fmt::format("key '{}' is 'cudnn', which needs a CUDA device (the run is on "
                                   "the CPU); use auto or ftune",
                                   key));
    if (!is16)
      throw InputError(fmt::format("key '{}' is 'cudnn', which needs training.precision bf16 or "
                                   "fp16 (cuDNN's flash attention has no fp32); use auto or ftune",
                                   key));
    if (!cudnn_built)
      throw InputError(fmt::format("key '{}' is 'cudnn', but this build has no cuDNN attention "
                                   "({}); use auto or ftune",
                                   key, cuda::cudnn_sdpa_build_note()));
    return {AttentionKernel::Cudnn, "training.attention cudnn (its own dropout masks)"};
  }
  if (device.is_cpu()) return {AttentionKernel::Ftune, "auto: the CPU runs ftune's attention"};
  if (!is16)
    return {AttentionKernel::Ftune, "auto: fp32 runs ftune's kernel (cuDNN flash attention is "
                                    "16-bit only)"};
  if (!cudnn_built) {
    cuda::fail_if_cudnn_required("training.attention auto: no cuDNN attention in this build",
                                 cuda::cudnn_sdpa_build_note());
    return {AttentionKernel::Ftune,
            "auto: no cuDNN attention in this build (" + cuda::cudnn_sdpa_build_note() + ")"};
  }
  return {AttentionKernel::Cudnn,
          fmt::format("auto: {} on a GPU: cuDNN flash attention (its own dropout masks; "
                      "training.attention ftune keeps the CPU's)",
                      precision_name(precision))};
}

ResolvedAttention resolve_attention(AttentionSetting value, Device device, Precision precision) {
  return resolve_attention(value, device, precision, cuda::cudnn_sdpa_compiled());
}

}  // namespace ftune
