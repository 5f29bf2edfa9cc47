// A shared library loaded on first use (see lazy_library.h).
#include "cuda/lazy_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <mutex>

namespace ftune::cuda {

LazyLibrary::LazyLibrary(std::string soname, const char* env)
    : soname_(std::move(soname)), env_(env) {}

std::string LazyLibrary::name() const {
  const char* v = env_ ? std::getenv(env_) : nullptr;
  return v && *v ? v : soname_;
}

void LazyLibrary::load() {
  static std::mutex mutex;  // one loader for every LazyLibrary: loads are rare
  std::lock_guard<std::mutex> lock(mutex);
  if (attempted_) return;
  const std::string n = name();
  handle_ = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* e = dlerror();
    error_ = fmt::format("{} could not be loaded: {}", n, e ? e : "dlopen failed");
  }
  attempted_ = true;
}

std::optional<std::string> LazyLibrary::load_error() {
  if (!attempted_) load();
  if (handle_) return std::nullopt;
  return error_;
}

void* LazyLibrary::symbol(const char* name) {
  if (!attempted_) load();
  return handle_ ? dlsym(handle_, name) : nullptr;
}

}  // namespace ftune::cuda
