// The CUDA libraries ftune uses and what this machine has of them, for `ftune doctor`: cuBLASLt
// (loaded on first use: cuda/cublaslt_loader.h), cuDNN (its runtime looked up with dlopen, so a machine
// without it is simply reported) and whether cuDNN's fused flash attention was compiled in.
// Plain C++ header; compiled in every build.
#pragma once

#include <string>

namespace ftune::cuda {

struct LibraryStatus {
  bool available = false;
  std::string version;  // "13.4.1"; empty when not available
  std::string detail;   // where it came from, or why it is missing
};

// cublasLtGetVersion() of cuBLASLt (loading it); why it cannot be loaded, or "not built with
// CUDA", otherwise.
LibraryStatus cublaslt_library();
// cudnnGetVersion() of libcudnn.so.9 (dlopen; $FTUNE_CUDNN_LIBRARY overrides the name).
LibraryStatus cudnn_library();
// "9.26.0" from cudnnGetVersion()'s 92600 (cuDNN 9: major * 10000 + minor * 100 + patch).
std::string cudnn_version_text(size_t version);

// cuDNN scaled-dot-product (flash) attention compiled in (FTUNE_WITH_CUDNN_SDPA: cudnn.h and
// cudnn_frontend.h were found at configure time); the note says what the build found or missed.
bool cudnn_sdpa_compiled();
std::string cudnn_sdpa_build_note();

// FTUNE_REQUIRE_CUDNN=1 (core/env_flag.h): where cuDNN attention is asked for
// (training.attention auto or cudnn on a 16-bit GPU run) and cuDNN refuses or is missing, fail
// with cuDNN's own message instead of running ftune's kernel with a warning; tests that would
// skip fail instead. The GPU kit sets it on sm_90, where cuDNN must run BERT-family attention.
// Read on every call.
bool cudnn_required();
// Throws DeviceError "FTUNE_REQUIRE_CUDNN=1: <what>: <why>" when cudnn_required(); else returns.
void fail_if_cudnn_required(const std::string& what, const std::string& why);

}  // namespace ftune::cuda
