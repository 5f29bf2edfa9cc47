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

}  // namespace ftune::cuda
