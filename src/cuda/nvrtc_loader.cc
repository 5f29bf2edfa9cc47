// NVRTC's entry points that cuDNN's frontend calls (its experimental Blackwell engines compile
// kernels at run time), forwarded to the library loaded on first use (cuda/lazy_library.h). A
// missing library fails each call with NVRTC_ERROR_INTERNAL_ERROR, which the frontend reports.
#ifdef FTUNE_WITH_CUDA

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nvrtc.h>

#include "cuda/lazy_library.h"

namespace ftune::cuda {

LazyLibrary& nvrtc_runtime() {
  static LazyLibrary lib(fmt::format("libnvrtc.so.{}", CUDART_VERSION / 1000),
                         "FTUNE_NVRTC_LIBRARY");
  return lib;
}

}  // namespace ftune::cuda

#define FTUNE_NVRTC(name, params, args) \
  FTUNE_LAZY_FORWARD(ftune::cuda::nvrtc_runtime(), nvrtcResult, name, params, args, \
                     NVRTC_ERROR_INTERNAL_ERROR)

extern "C" {

FTUNE_NVRTC(nvrtcCreateProgram,
            (nvrtcProgram * prog, const char* src, const char* name, int num_headers,
             const char* const* headers, const char* const* include_names),
            (prog, src, name, num_headers, headers, include_names))
FTUNE_NVRTC(nvrtcDestroyProgram, (nvrtcProgram * prog), (prog))
FTUNE_NVRTC(nvrtcCompileProgram, (nvrtcProgram prog, int num_options, const char* const* options),
            (prog, num_options, options))
FTUNE_NVRTC(nvrtcGetCUBINSize, (nvrtcProgram prog, size_t* size), (prog, size))
FTUNE_NVRTC(nvrtcGetCUBIN, (nvrtcProgram prog, char* cubin), (prog, cubin))
FTUNE_NVRTC(nvrtcGetProgramLogSize, (nvrtcProgram prog, size_t* size), (prog, size))
FTUNE_NVRTC(nvrtcGetProgramLog, (nvrtcProgram prog, char* log), (prog, log))

}  // extern "C"

#endif  // FTUNE_WITH_CUDA
