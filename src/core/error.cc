// Out-of-line construction of internal-error messages (keeps FTUNE_ASSERT small at call sites).
#include "core/error.h"

#include <fmt/format.h>

namespace ftune {

void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw InternalError(fmt::format("internal error at {}:{}: {} ({})", file, line, msg, cond));
}

void throw_cuda_error(const char* file, int line, const char* call, const char* name,
                      const char* text) {
  throw DeviceError(
      fmt::format("CUDA error at {}:{}: {} returned {} ({})", file, line, call, name, text));
}

}  // namespace ftune
