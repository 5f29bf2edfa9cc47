// Versions of cuBLASLt and cuDNN (see cuda_libraries.h).
#include "cuda/cuda_libraries.h"

#include "cuda/lazy_library.h"

#include <dlfcn.h>

#include <cstdlib>

#include <fmt/format.h>

#include "core/env_flag.h"
#include "core/error.h"

#ifdef FTUNE_WITH_CUDA
#include <cublasLt.h>
#endif

namespace ftune::cuda {

LibraryStatus cublaslt_library() {
  LibraryStatus s;
#ifdef FTUNE_WITH_CUDA
  if (const auto error = cublaslt_runtime().load_error()) {
    s.detail = *error;
    return s;
  }
  // cuBLAS encodes major * 10000 + minor * 100 + patch (13.4.1 -> 130401).
  const size_t v = cublasLtGetVersion();
  s.available = true;
  s.version = fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
  s.detail = cublaslt_runtime().name() + " (loaded on first use)";
#else
  s.detail = "not built with CUDA (FTUNE_CUDA=OFF)";
#endif
  return s;
}

std::string cudnn_version_text(size_t v) {
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

LibraryStatus cudnn_library() {
  LibraryStatus s;
  const char* env = std::getenv("FTUNE_CUDNN_LIBRARY");
  const std::string path = env && *env ? env : "libcudnn.so.9";
  void* dl = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    const char* e = dlerror();
    s.detail = e ? e : path + ": cannot be loaded";
    return s;
  }
  using GetVersion = size_t (*)();
  const auto get_version = reinterpret_cast<GetVersion>(dlsym(dl, "cudnnGetVersion"));
  if (!get_version) {
    s.detail = path + ": no symbol cudnnGetVersion";
  } else {
    s.available = true;
    s.version = cudnn_version_text(get_version());
    s.detail = path;
  }
  dlclose(dl);
  return s;
}

bool cudnn_sdpa_compiled() {
#ifdef FTUNE_WITH_CUDNN_SDPA
  return true;
#else
  return false;
#endif
}

std::string cudnn_sdpa_build_note() {
#ifdef FTUNE_CUDNN_SDPA_NOTE
  return FTUNE_CUDNN_SDPA_NOTE;  // set by CMake from what it found
#elif defined(FTUNE_WITH_CUDA)
  return "this build has no cuDNN attention";
#else
  return "not built with CUDA";
#endif
}

bool cudnn_required() {
  return env_flag("FTUNE_REQUIRE_CUDNN");
}

void fail_if_cudnn_required(const std::string& what, const std::string& why) {
  if (cudnn_required()) throw DeviceError(fmt::format("FTUNE_REQUIRE_CUDNN=1: {}: {}", what, why));
}

}  // namespace ftune::cuda
