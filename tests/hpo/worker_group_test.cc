// Several workers on one device (hpo/worker_group.h): each worker's share of the cores, and the
// slot a supervisor hands its workers.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "core/error.h"
#include "hpo/worker_group.h"

namespace ftune::hpo {
namespace {

TEST(WorkerGroup, CoresAreSharedOutContiguouslyAndAsEquallyAsTheyCanBe) {
  const std::vector<int> eight = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(worker_cores(eight, {0, 3}), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(worker_cores(eight, {1, 3}), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(worker_cores(eight, {2, 3}), (std::vector<int>{6, 7}));
  EXPECT_EQ(worker_cores(eight, {1, 2}), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(worker_cores(eight, {0, 1}), eight);
  // The CPUs this process may use need not start at 0 nor be contiguous (taskset, cpusets).
  EXPECT_EQ(worker_cores({2, 5, 9, 11}, {1, 2}), (std::vector<int>{9, 11}));
  // Fewer cores than workers: one core each, round-robin.
  EXPECT_EQ(worker_cores({0, 1}, {0, 4}), (std::vector<int>{0}));
  EXPECT_EQ(worker_cores({0, 1}, {3, 4}), (std::vector<int>{1}));
}

TEST(WorkerGroup, TheSlotComesFromTheEnvironmentAndAMalformedOneIsRefused) {
  unsetenv("FTUNE_HPO_WORKER_SLOT");
  EXPECT_FALSE(worker_slot_from_env().has_value());
  setenv("FTUNE_HPO_WORKER_SLOT", "1/4", 1);
  const auto slot = worker_slot_from_env();
  ASSERT_TRUE(slot.has_value());
  EXPECT_EQ(slot->index, 1);
  EXPECT_EQ(slot->count, 4);
  for (const char* bad : {"4/4", "-1/2", "x", "1/0", "1/2x"}) {
    setenv("FTUNE_HPO_WORKER_SLOT", bad, 1);
    try {
      worker_slot_from_env();
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("expected INDEX/COUNT"), std::string::npos) << e.what();
    }
  }
  unsetenv("FTUNE_HPO_WORKER_SLOT");
}

TEST(WorkerGroup, AllowedCpusAreThisProcesssAffinity) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  for (size_t i = 1; i < cpus.size(); ++i) EXPECT_LT(cpus[i - 1], cpus[i]);
}

}  // namespace
}  // namespace ftune::hpo
