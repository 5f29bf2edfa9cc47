// DirLock: one holder at a time (a second open file description of the same process is refused,
// as another process would be, naming the holder's pid), released on destruction with its lock
// file, and a directory it created for nothing is removed again.
#include "io/dir_lock.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "core/error.h"
#include "test_util.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

TEST(DirLock, OneHolderAtATime) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/run";
  std::optional<io::DirLock> held(io::DirLock::acquire(dir, "output.dir"));
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_EQ(file_bytes(dir + "/.ftune.lock"), std::to_string(getpid()) + "\n");
  try {
    io::DirLock::acquire(dir, "output.dir");
    ADD_FAILURE() << "a second lock was granted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("output.dir " + dir +
                                         " is in use by another ftune "
                                         "process (pid " +
                                         std::to_string(getpid()) + ")"),
              std::string::npos)
        << e.what();
  }
  held.reset();
  EXPECT_FALSE(fs::exists(dir)) << "created for nothing: removed with the lock";

  fs::create_directories(dir);
  std::ofstream(dir + "/kept") << "x";
  {
    const io::DirLock again = io::DirLock::acquire(dir, "output.dir");
    EXPECT_TRUE(fs::exists(dir + "/.ftune.lock"));
  }
  EXPECT_FALSE(fs::exists(dir + "/.ftune.lock"));
  EXPECT_TRUE(fs::exists(dir + "/kept"));
}

TEST(DirLock, NamesAPathThatCannotBeADirectory) {
  TempDir tmp;
  const std::string file = tmp.path() + "/file";
  std::ofstream(file) << "x";
  auto message = [](const std::string& dir) {
    try {
      io::DirLock::acquire(dir, "output.dir");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(file), "output.dir " + file + " exists and is not a directory");
  EXPECT_EQ(message(file + "/run"), "cannot create output.dir " + file + "/run: Not a directory");
}

}  // namespace
}  // namespace ftune::test
