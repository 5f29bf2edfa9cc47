// A read-only memory map of a whole file. Checkpoints are mapped rather than read so that a
// tensor's bytes are paged in only when it is converted into its destination, and several GB of
// weights never sit twice in host memory.
#pragma once

#include <cstddef>
#include <string>

namespace ftune::io {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path`; InputError naming it when it is missing, a directory or cannot be mapped. An
  // empty file maps to data() == nullptr, size() == 0.
  static MappedFile open(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release() noexcept;

  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ftune::io
