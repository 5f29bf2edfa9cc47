// Directory locks with flock(2) (see dir_lock.h).
//
// The lock file is removed on release, so a process that opened it just before the holder
// removed it could lock a file no longer in the directory; after flock succeeds, acquire()
// therefore checks that the path still names the locked inode and tries again if not.
#include "io/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"

namespace ftune::io {
namespace {

namespace fs = std::filesystem;

std::string holder_of(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  std::string pid(buf, n > 0 ? static_cast<size_t>(n) : 0);
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.empty() ? std::string("not yet known") : pid;
}

}  // namespace

DirLock DirLock::acquire(const std::string& dir, const std::string& what) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw InputError(fmt::format("{} {} exists and is not a directory", what, dir));
  const bool created = fs::create_directories(dir, ec);
  if (ec) throw InputError(fmt::format("cannot create {} {}: {}", what, dir, ec.message()));
  const std::string path = (fs::path(dir) / kFileName).string();
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      const int err = errno;
      if (created) fs::remove(dir, ec);
      throw InputError(fmt::format("cannot write in {} {}: {}", what, dir, std::strerror(err)));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string pid = holder_of(fd);
      ::close(fd);
      if (err != EWOULDBLOCK)
        throw InputError(fmt::format("cannot lock {} {}: {}", what, dir, std::strerror(err)));
      throw InputError(fmt::format(
          "{} {} is in use by another ftune process (pid {}); wait for it to finish or stop it, "
          "or use another {}",
          what, dir, pid, what));
    }
    struct stat locked {
    }, named{};
    if (::fstat(fd, &locked) != 0 || ::stat(path.c_str(), &named) != 0 ||
        locked.st_ino != named.st_ino || locked.st_dev != named.st_dev) {
      ::close(fd);  // a file its last holder had already removed: try the one there now
      continue;
    }
    const std::string pid = fmt::format("{}\n", static_cast<long>(::getpid()));
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
      const int err = errno;
      ::close(fd);
      throw InputError(fmt::format("cannot write {}: {}", path, std::strerror(err)));
    }
    return DirLock(dir, fd, created);
  }
  throw InputError(fmt::format("cannot lock {} {}: its lock file keeps changing", what, dir));
}

DirLock::DirLock(DirLock&& other) noexcept
    : dir_(std::move(other.dir_)), fd_(other.fd_), created_(other.created_) {
  other.fd_ = -1;
}

DirLock::~DirLock() {
  if (fd_ < 0) return;
  std::error_code ec;
  fs::remove(fs::path(dir_) / kFileName, ec);  // while still locked (see the file comment)
  ::close(fd_);
  if (created_) fs::remove(dir_, ec);  // only an empty directory goes
}

}  // namespace ftune::io
