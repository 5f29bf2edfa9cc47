// Atomic writes: content replaced whole or not at all, temporaries never left behind.
#include "io/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <stdexcept>
#include <thread>

#include "io_test_helpers.h"
#include "test_util.h"

namespace ftune::io {
namespace {

using test::expect_input_error;
using test::list_dir;
using test::TempDir;

TEST(AtomicFile, WritesAndReplaces) {
  TempDir dir;
  const std::string path = dir.path() + "/out.bin";
  write_file_atomic(path, std::string("first\0bytes", 11));
  EXPECT_EQ(read_file(path), std::string("first\0bytes", 11));
  write_file_atomic(path, "second");
  EXPECT_EQ(read_file(path), "second");
  write_file_atomic(path, "");
  EXPECT_EQ(read_file(path), "");
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"out.bin"});
}

TEST(AtomicFile, NewFileGetsUmaskPermissions) {
  TempDir dir;
  const std::string path = dir.path() + "/perm.txt";
  const mode_t mask = ::umask(0);
  ::umask(mask);
  write_file_atomic(path, "x");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);
}

TEST(AtomicFile, ExceptionMidWriteKeepsOldFileAndRemovesTemp) {
  TempDir dir;
  const std::string path = dir.path() + "/model.safetensors";
  write_file_atomic(path, "old content");
  std::string temp;
  try {
    AtomicFileWriter writer(path);
    temp = writer.temp_path();
    writer.write("new, but only ");
    EXPECT_TRUE(std::filesystem::exists(temp));
    throw std::runtime_error("simulated failure while converting a tensor");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(temp.empty());
  EXPECT_FALSE(std::filesystem::exists(temp));
  EXPECT_EQ(read_file(path), "old content");
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"model.safetensors"});
}

TEST(AtomicFile, AbortAndFinishedWriterState) {
  TempDir dir;
  const std::string path = dir.path() + "/a.txt";
  {
    AtomicFileWriter writer(path);
    writer.write("abc");
    EXPECT_EQ(writer.bytes_written(), 3u);
    writer.abort();
    writer.abort();  // idempotent
    EXPECT_THROW(writer.write("more"), InputError);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(list_dir(dir.path()).empty());

  AtomicFileWriter writer(path);
  writer.write("done");
  writer.commit();
  EXPECT_THROW(writer.commit(), InputError);
  EXPECT_EQ(read_file(path), "done");
}

TEST(AtomicFile, MissingDirectoryIsAnInputError) {
  TempDir dir;
  const std::string path = dir.path() + "/no/such/dir/file.json";
  expect_input_error([&] { write_file_atomic(path, "x"); }, {path, "No such file"});
}

TEST(AtomicFile, FailedRenameRemovesTempAndKeepsTarget) {
  // Root ignores permission bits, so make the final rename fail instead: the target is a
  // non-empty directory, which rename(2) cannot replace with a file.
  TempDir dir;
  const std::string path = dir.path() + "/target";
  std::filesystem::create_directory(path);
  test::write_bytes(path + "/keep.txt", "kept");
  expect_input_error([&] { write_file_atomic(path, "data"); }, {path, "rename"});
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"target"});
  EXPECT_EQ(read_file(path + "/keep.txt"), "kept");
}

TEST(AtomicFile, ConcurrentWritersNeverTear) {
  TempDir dir;
  const std::string path = dir.path() + "/shared.txt";
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::string content(10000, static_cast<char>('a' + t));
      for (int i = 0; i < 10; ++i) write_file_atomic(path, content);
    });
  }
  for (auto& th : threads) th.join();
  const std::string got = read_file(path);
  ASSERT_EQ(got.size(), 10000u);
  EXPECT_EQ(got, std::string(10000, got[0]));
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"shared.txt"});
}

TEST(AtomicFile, ReadFileErrorsNameThePath) {
  TempDir dir;
  expect_input_error([&] { read_file(dir.path() + "/missing.json"); },
                     {dir.path() + "/missing.json", "No such file"});
  expect_input_error([&] { read_file(dir.path()); }, {dir.path(), "is a directory"});
  expect_input_error([&] { AtomicFileWriter w(dir.path() + "/"); }, {"not a file path"});
}

}  // namespace
}  // namespace ftune::io
