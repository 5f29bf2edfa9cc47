// CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78), the checksum of TFRecord
// files, and its "masked" form that TensorFlow stores so that a CRC of data that itself holds CRCs
// stays well distributed. Debian 12 ships no C/C++ CRC32C library, so this is the plain
// byte-at-a-time table method (speed is irrelevant for event files of a few KiB per minute).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ftune::io {

// CRC-32C of `size` bytes, continuing from `crc` (0 for a fresh checksum): crc32c("123456789") is
// 0xE3069283.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
inline uint32_t crc32c(std::string_view bytes) {
  return crc32c(bytes.data(), bytes.size());
}

// TensorFlow's mask: rotate right by 15 bits and add 0xa282ead8.
inline uint32_t mask_crc32c(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
inline uint32_t unmask_crc32c(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace ftune::io
