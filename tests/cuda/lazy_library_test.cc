// Libraries loaded on first use (cuda/lazy_library.h): a library loads when a symbol is first
// asked for, one that cannot be loaded is named in the error, and with cuBLASLt missing every
// forwarded call fails with an error that names it (what a GPU run and `ftune doctor` report).
// These run on the CPU; they never need a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cuda/cuda_libraries.h"
#include "cuda/lazy_library.h"

#ifdef FTUNE_WITH_CUDA
#include <cublasLt.h>
#endif

namespace ftune::cuda {
namespace {

TEST(LazyLibrary, LoadsOnFirstUseAndNamesWhatIsMissing) {
  LazyLibrary libm("libm.so.6", nullptr);
  EXPECT_FALSE(libm.attempted());
  EXPECT_NE(libm.symbol("cos"), nullptr);
  EXPECT_TRUE(libm.attempted());
  EXPECT_FALSE(libm.load_error().has_value());
  EXPECT_EQ(libm.symbol("ftune_no_such_symbol"), nullptr);

  LazyLibrary missing("libftune-no-such-library.so.1", nullptr);
  const auto error = missing.load_error();
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("libftune-no-such-library.so.1"), std::string::npos) << *error;
  EXPECT_EQ(missing.symbol("cos"), nullptr);

  setenv("FTUNE_TEST_LAZY_LIBRARY", "libftune-other.so.2", 1);
  LazyLibrary overridden("libm.so.6", "FTUNE_TEST_LAZY_LIBRARY");
  EXPECT_EQ(overridden.name(), "libftune-other.so.2");
  EXPECT_TRUE(overridden.load_error().has_value());
  unsetenv("FTUNE_TEST_LAZY_LIBRARY");
}

#ifdef FTUNE_WITH_CUDA
TEST(LazyLibrary, AMissingCublasLtIsNamedByEveryCall) {
  // The process has not touched cuBLASLt yet (each test runs in its own process), so the
  // override decides what is loaded.
  ASSERT_FALSE(cublaslt_runtime().attempted());
  setenv("FTUNE_CUBLASLT_LIBRARY", "/nonexistent/libcublasLt.so.13", 1);
  cublasLtHandle_t handle = nullptr;
  EXPECT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasLtGetVersion(), 0u);
  const std::string text = cublasLtGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_NE(text.find("/nonexistent/libcublasLt.so.13"), std::string::npos) << text;
  const LibraryStatus status = cublaslt_library();  // what `ftune doctor` prints
  EXPECT_FALSE(status.available);
  EXPECT_NE(status.detail.find("/nonexistent/libcublasLt.so.13"), std::string::npos)
      << status.detail;
  unsetenv("FTUNE_CUBLASLT_LIBRARY");
}
#endif

}  // namespace
}  // namespace ftune::cuda
