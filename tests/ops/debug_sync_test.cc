// FTUNE_CUDA_DEBUG_SYNC (ops/dispatch.h): read from the environment (core/env_flag.h), overridden
// by set_cuda_debug_sync, and, on a GPU, a fault reported by the op that caused it. The fault and
// the environment are tried in child processes (gtest's threadsafe death tests re-run this binary),
// since a faulted CUDA context is lost for the rest of its process and the switch is read once.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/device.h"
#include "core/env_flag.h"
#include "core/error.h"
#include "ops/dispatch.h"
#include "ops/residual.h"
#include "test_util.h"

namespace ftune::test {
namespace {

TEST(EnvFlag, OneSpellingRuleForEverySwitch) {
  for (const char* v : {"1", "true", "on", "yes", "TRUE", "Yes", "ON"})
    EXPECT_TRUE(parse_env_flag("FTUNE_X", v)) << v;
  for (const char* v : {"", "0", "false", "off", "no", "False", "NO"})
    EXPECT_FALSE(parse_env_flag("FTUNE_X", v)) << v;
  EXPECT_FALSE(parse_env_flag("FTUNE_X", nullptr));
  try {
    parse_env_flag("FTUNE_REQUIRE_CUDNN", "2");
    ADD_FAILURE() << "a value that is no switch was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("FTUNE_REQUIRE_CUDNN='2'"), std::string::npos)
        << e.what();
  }
  ScopedEnv set("FTUNE_TEST_SWITCH", "on");
  EXPECT_TRUE(env_flag("FTUNE_TEST_SWITCH"));
  ScopedEnv unset("FTUNE_TEST_SWITCH", nullptr);
  EXPECT_FALSE(env_flag("FTUNE_TEST_SWITCH"));
}

class CudaDebugSync : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
  void TearDown() override { set_cuda_debug_sync(false); }
};

TEST_F(CudaDebugSync, ComesFromTheEnvironmentAndTheSetterOverridesIt) {
  {
    ScopedEnv on("FTUNE_CUDA_DEBUG_SYNC", "1");
    EXPECT_EXIT(std::exit(cuda_debug_sync() ? 3 : 4), ::testing::ExitedWithCode(3), "");
  }
  {
    ScopedEnv off("FTUNE_CUDA_DEBUG_SYNC", "0");
    EXPECT_EXIT(std::exit(cuda_debug_sync() ? 3 : 4), ::testing::ExitedWithCode(4), "");
  }
  set_cuda_debug_sync(true);
  EXPECT_TRUE(cuda_debug_sync());
  set_cuda_debug_sync(false);
  EXPECT_FALSE(cuda_debug_sync());
  // On the CPU, or with it off, the check after an op does nothing.
  cuda_debug_sync_after("residual_forward");
}

// residual_forward into a device address that is not memory: the kernel faults.
void faulting_op() {
  float* bad = reinterpret_cast<float*>(uintptr_t{1} << 12);
  const Device gpu = Device::cuda(0);
  const TensorView out(bad, DType::F32, gpu, Shape{1024}), a(bad, DType::F32, gpu, Shape{1024});
  residual_forward(out, a, a);
}

TEST_F(CudaDebugSync, AFaultIsReportedByTheOpThatCausedIt) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  // Off: the launch returns, the fault waits for a later synchronisation.
  EXPECT_EXIT(
      {
        set_cuda_debug_sync(false);
        faulting_op();
        std::fprintf(stderr, "returned\n");
        std::fflush(stderr);
        std::_Exit(0);  // no teardown: the context holds a fault nobody has seen yet
      },
      ::testing::ExitedWithCode(0), "returned");
  // On: the op itself throws, naming itself and CUDA's error.
  EXPECT_EXIT(
      {
        set_cuda_debug_sync(true);
        try {
          faulting_op();
        } catch (const DeviceError& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::fflush(stderr);
          std::_Exit(3);
        }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(3), "FTUNE_CUDA_DEBUG_SYNC: after residual_forward: cuda");
}

}  // namespace
}  // namespace ftune::test
