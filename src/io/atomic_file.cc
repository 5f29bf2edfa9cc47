// Temporary-file-and-rename writes with fsync of file and directory, and whole-file reads.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "core/error.h"

namespace ftune::io {
namespace {

constexpr unsigned kRenameExchange = 1u << 1;  // linux/fs.h RENAME_EXCHANGE

std::string errno_text(int err) {
  return std::strerror(err);
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A name no other writer (thread or process) picks: pid, a process-wide counter and random bits.
std::string temp_name_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const std::string dir = dir_of(path);
  return fmt::format("{}/.{}.tmp-{}-{}-{:08x}", dir, base_of(path), ::getpid(), counter++,
                     static_cast<uint32_t>(rng()));
}

void fsync_directory(const std::string& dir, const std::string& path) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    throw InputError(
        fmt::format("cannot open directory of {} to sync it: {}", path, errno_text(errno)));
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  // Some file systems cannot sync directories (EINVAL); the rename itself has happened.
  if (rc != 0 && err != EINVAL && err != EROFS)
    throw InputError(fmt::format("cannot sync the directory of {}: {}", path, errno_text(err)));
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  if (path_.empty() || path_.back() == '/')
    throw InputError(fmt::format("cannot write '{}': not a file path", path_));
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_path_ = temp_name_for(path_);
    // 0666 filtered by the umask: the same permissions an ordinary new file gets.
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) {
      registered_ = SignalTemporary(temp_path_, false);
      return;
    }
    if (errno != EEXIST) break;
  }
  const int err = errno;
  temp_path_.clear();
  throw InputError(fmt::format("cannot write {}: cannot create a file in {}: {}", path_,
                               dir_of(path_), errno_text(err)));
}

AtomicFileWriter::~AtomicFileWriter() {
  abort();
}

void AtomicFileWriter::write(const void* data, size_t size) {
  if (fd_ < 0) throw InputError(fmt::format("cannot write {}: writer is already finished", path_));
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      abort();
      throw InputError(fmt::format("cannot write {}: {}", path_, errno_text(err)));
    }
    p += n;
    size -= static_cast<size_t>(n);
    written_ += static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) throw InputError(fmt::format("cannot write {}: writer is already finished", path_));
  if (::fsync(fd_) != 0) {
    const int err = errno;
    abort();
    throw InputError(fmt::format("cannot write {}: fsync failed: {}", path_, errno_text(err)));
  }
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) {
    const int err = errno;
    abort();
    throw InputError(fmt::format("cannot write {}: close failed: {}", path_, errno_text(err)));
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    abort();
    throw InputError(fmt::format("cannot write {}: rename failed: {}", path_, errno_text(err)));
  }
  temp_path_.clear();
  registered_.release();
  fsync_directory(dir_of(path_), path_);
}

void AtomicFileWriter::abort() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temp_path_.empty()) {
    ::unlink(temp_path_.c_str());
    temp_path_.clear();
  }
  registered_.release();
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFileWriter writer(path);
  writer.write(bytes);
  writer.commit();
}

std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(fmt::format("cannot read {}: {}", path, errno_text(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool is_dir = S_ISDIR(st.st_mode);
    ::close(fd);
    throw InputError(
        fmt::format("cannot read {}: {}", path,
                    is_dir ? "is a directory, expected a file" : "not a regular file"));
  }
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw InputError(fmt::format("cannot read {}: {}", path, errno_text(err)));
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

void replace_directory(const std::string& built, const std::string& target,
                       const std::string& aside) {
  namespace fs = std::filesystem;
  if (!fs::exists(fs::symlink_status(target))) {
    fs::rename(built, target);
    return;
  }
  if (::syscall(SYS_renameat2, AT_FDCWD, built.c_str(), AT_FDCWD, target.c_str(),
                kRenameExchange) == 0) {
    fs::remove_all(built);  // the old directory
    return;
  }
  SignalTemporary old(aside, true);  // a signal between the renames: the old one is gone anyway
  fs::remove_all(aside);
  fs::rename(target, aside);
  fs::rename(built, target);
  fs::remove_all(aside);
}

}  // namespace ftune::io
