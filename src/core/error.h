// Errors by kind. Bad input (files, configs, data rows) raises InputError naming what is wrong and
// where; misuse of an op raises ShapeError; CUDA failures raise DeviceError with file:line;
// internal invariants use FTUNE_ASSERT, which stays on in release builds. The CLI maps every
// ftune::Error to a message and a non-zero exit code.
#pragma once

#include <stdexcept>
#include <string>

namespace ftune {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file, config key or data row is wrong; the message names it and says what was expected.
class InputError : public Error {
 public:
  using Error::Error;
};

// An op was called with tensors of the wrong shape, dtype or device.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A CUDA / cuBLAS / driver call failed, or the requested device does not exist.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// A planned buffer does not fit, or a device allocation failed.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// The requested backend was not compiled into this build (e.g. CUDA with FTUNE_CUDA=OFF).
class NotBuiltError : public Error {
 public:
  using Error::Error;
};

// A run stopped on SIGTERM / SIGINT after saving what it needs to resume; main() exits with
// 128 + signal.
class Interrupted : public Error {
 public:
  Interrupted(const std::string& what, int signal) : Error(what), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

// An internal invariant failed: a bug in ftune, not in the user's input.
class InternalError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void throw_internal(const char* file, int line, const char* cond,
                                 const std::string& msg);
// Raises DeviceError for a failed CUDA call (used by FTUNE_CUDA_CHECK; kept out of line so .cu
// files need no formatting library).
[[noreturn]] void throw_cuda_error(const char* file, int line, const char* call, const char* name,
                                   const char* text);

}  // namespace ftune

// fmt's compile-time format strings are consteval, which nvcc's front end rejects: CUDA
// translation units get the error types but not the formatting assertion.
#ifndef __CUDACC__
#include <fmt/format.h>

// Always-on assertion for internal invariants (not for user input: use InputError there).
#define FTUNE_ASSERT(cond, ...)                                                                \
  do {                                                                                         \
    if (!(cond)) ::ftune::throw_internal(__FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
  } while (0)
#endif
