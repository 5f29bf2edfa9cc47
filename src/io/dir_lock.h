// An exclusive lock on a directory, so that two processes never use one run directory at once
// (a --resume next to a live run, an overwrite wiping it): flock(2) on DIR/.ftune.lock, which the
// kernel releases when the holder dies, kill -9 included, so a lock is never stale. The holder
// writes its pid into the file, and a refused process names it.
#pragma once

#include <string>

namespace ftune::io {

class DirLock {
 public:
  // Creates DIR when needed and locks it. Throws InputError naming `what` ("output.dir") and DIR
  // when DIR is a file or cannot be created or written, or when another process holds the lock
  // (with its pid).
  static DirLock acquire(const std::string& dir, const std::string& what);

  DirLock(DirLock&& other) noexcept;
  DirLock& operator=(DirLock&& other) = delete;
  DirLock(const DirLock&) = delete;
  // Releases the lock and removes the lock file; removes DIR too when acquire() created it and
  // nothing else was written there (a run refused before it started leaves no directory).
  ~DirLock();

  static constexpr const char* kFileName = ".ftune.lock";

 private:
  DirLock(std::string dir, int fd, bool created)
      : dir_(std::move(dir)), fd_(fd), created_(created) {}
  std::string dir_;
  int fd_ = -1;
  bool created_ = false;
};

}  // namespace ftune::io
