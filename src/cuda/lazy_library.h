// A shared library loaded on first use (dlopen) instead of linked, so that a process that never
// calls it never maps it: cuBLASLt and NVRTC were ~90 MiB of a CPU run's ~200 MiB baseline
// (issue 26). Their entry points are defined by forwarding functions (FTUNE_LAZY_FORWARD, in
// cuda/cublaslt_loader.cc and cuda/nvrtc_loader.cc) under the libraries' own declarations, so the
// call sites stay as they are and a changed signature fails to compile.
#pragma once

#include <atomic>
#include <optional>
#include <string>

namespace ftune::cuda {

class LazyLibrary {
 public:
  // `soname`: what dlopen is given ("libcublasLt.so.13"); `env`: a variable that overrides it.
  LazyLibrary(std::string soname, const char* env);
  // The name dlopen is (or would be) given.
  std::string name() const;
  // Loads the library on the first call (thread-safe); nullopt once loaded, else dlerror's words.
  std::optional<std::string> load_error();
  // The symbol, loading the library first; nullptr when either is missing.
  void* symbol(const char* name);
  // Whether a load was tried in this process.
  bool attempted() const { return attempted_; }

 private:
  void load();
  std::string soname_;
  const char* env_;
  std::atomic<bool> attempted_{false};
  void* handle_ = nullptr;
  std::string error_;
};

// The libraries loaded this way (defined in their loader files; CUDA builds only).
LazyLibrary& cublaslt_runtime();  // libcublasLt.so.<major of the headers>, $FTUNE_CUBLASLT_LIBRARY
LazyLibrary& nvrtc_runtime();     // libnvrtc.so.<major>, $FTUNE_NVRTC_LIBRARY
LazyLibrary& nccl_runtime();      // libnccl.so.<major>, $FTUNE_NCCL_LIBRARY (cuda/nccl.h)

}  // namespace ftune::cuda

// Defines `ret name params` (the library's own declaration must be visible) forwarding to the
// symbol of `library` (a LazyLibrary&); returns `fail` when the library or the symbol is missing.
#define FTUNE_LAZY_FORWARD(library, ret, name, params, args, fail)            \
  ret name params {                                                          \
    static const auto fn = reinterpret_cast<ret(*) params>((library).symbol(#name)); \
    if (!fn) return fail;                                                    \
    return fn args;                                                          \
  }
