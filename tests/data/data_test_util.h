// Helpers for the data tests: small files written into a TempDir, and the message of the
// InputError a call raises.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "io/atomic_file.h"
#include "test_util.h"

namespace ftune::test {

inline std::string write_data_file(const TempDir& dir, const std::string& name,
                                   const std::string& content) {
  const std::string path = dir.path() + "/" + name;
  io::write_file_atomic(path, content);
  return path;
}

// The message of the InputError `fn` raises; fails the test when it raises none.
template <typename Fn>
std::string input_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError raised";
  return "";
}

}  // namespace ftune::test
