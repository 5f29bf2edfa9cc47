// Whole-file reads and crash-safe writes. A write goes to a temporary file in the target's
// directory, is fsync'ed, renamed over the target and the directory is fsync'ed: a reader (or a
// run killed half-way) sees either the old file or the complete new one, never a torn mix. On any
// error the temporary is removed and a previous file at the target is left untouched; a command
// that installed io::remove_temporaries_on_signals() removes it on SIGTERM / SIGINT / SIGHUP too.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "io/signal_cleanup.h"

namespace ftune::io {

// Streams bytes into a temporary next to `path`; commit() publishes them at `path`. Destroying
// the writer (or calling abort()) without commit removes the temporary, so an exception thrown
// half-way through writing leaves nothing behind. Errors raise InputError naming `path`.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t size);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // fsync, rename over the target, fsync the directory. The writer is finished afterwards.
  void commit();
  // Removes the temporary without publishing (idempotent; the destructor calls it).
  void abort() noexcept;

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  size_t bytes_written() const { return written_; }

 private:
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  size_t written_ = 0;
  SignalTemporary registered_;  // removed by a terminating signal too (io/signal_cleanup.h)
};

// Writes `bytes` to `path` atomically (see AtomicFileWriter).
void write_file_atomic(const std::string& path, std::string_view bytes);

// Puts the finished directory `built` at `target` whole. A `target` that exists is exchanged with
// it atomically (renameat2 RENAME_EXCHANGE: `target` is at every moment the old directory or the
// new one) and the old one, now at `built`, removed; where the file system cannot exchange, the
// old one is renamed to `aside`, `built` renamed in and `aside` removed. The caller has checked
// that the old `target` is its own to remove.
void replace_directory(const std::string& built, const std::string& target,
                       const std::string& aside);

// The whole content of a file; InputError naming the path when it is missing or unreadable.
std::string read_file(const std::string& path);

}  // namespace ftune::io
