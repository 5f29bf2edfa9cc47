// Under an address-space limit (ulimit -v) ftune ends promptly with its status and a message that
// says what ran out; it used to spin for ever in OpenBLAS's blas_memory_alloc (deaf to SIGTERM)
// or hang in exit() on a stuck OpenBLAS thread. Each run is killed after 120 s so that a hang
// fails the test (status 137) rather than the suite; a prompt run takes a second.
#include <gtest/gtest.h>

#include <fstream>

#include "run_cli.h"
#include "test_util.h"

namespace ftune::test {
namespace {

TEST(ResourceLimits, AddressSpaceLimitEndsPromptlyWithAMessage) {
  TempDir tmp;
  const std::string rows = tmp.path() + "/rows.jsonl";
  std::ofstream(rows) << "{\"input_ids\": [2, 5, 7, 3]}\n";
  const std::string model = fixtures_dir() + "/engine/bert_pair/model";
  for (const int mb : {150, 300, 600}) {
    for (const int threads : {1, 2}) {
      const CliResult r =
          run_ftune("predict --model " + model + " --data " + rows + " --output " + tmp.path() +
                        "/out.jsonl --threads " + std::to_string(threads),
                    "ulimit -v " + std::to_string(mb * 1024) + "; timeout -s KILL 120");
      SCOPED_TRACE(std::to_string(mb) + " MB, " + std::to_string(threads) + " threads");
      EXPECT_NE(r.exit_code, 137) << "hung: " << r.output;
      if (r.exit_code != 0) {
        EXPECT_EQ(r.exit_code, 2) << r.output;
        EXPECT_TRUE(r.output.find("address-space limit") != std::string::npos ||
                    r.output.find("out of memory") != std::string::npos ||
                    r.output.find("cannot allocate") != std::string::npos)
            << r.output;
      }
    }
  }
}

}  // namespace
}  // namespace ftune::test
