// Fuzzes the safetensors reader (io/safetensors.h) with any bytes as one file, twice: from the
// fuzzer's own buffer (SafetensorsFile::view; the buffer is exactly the input's size, so
// AddressSanitizer sees a read one byte past the end) and through a file and its memory map
// (SafetensorsFile::open, what loading uses). Both must agree: the same tensors, or both refuse
// with an InputError. Every tensor that opens is then read the ways loading reads it: into f32,
// bf16 and f16 from float storage (bf16 -> f32 -> bf16 and f16 -> f32 -> f16 must give the stored
// bits back), as itself for integer storage, and into a wrong shape or dtype (InputError).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/memory.h"
#include "fuzz_files.h"
#include "io/safetensors.h"

namespace {

using namespace ftune;
using io::SafetensorsDtype;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_safetensors: %s\n", what);
    std::abort();
  }
}

bool is_nan16(uint16_t bits, bool bf16) {
  return bf16 ? (bits & 0x7fff) > 0x7f80 : (bits & 0x7fff) > 0x7c00;
}

// 16-bit storage read into f32 and back must reproduce every non-NaN pattern.
void check_round_trip(const io::SafetensorsFile& f, const io::SafetensorsEntry& e, DType d16) {
  const bool bf16 = d16 == DType::BF16;
  const HostTensor wide = f.read(e.name, DType::F32);
  const HostTensor back = f.read(e.name, d16);
  const HostTensor narrow(d16, wide.shape());
  convert(narrow.view(), wide.view());
  for (int64_t i = 0; i < e.numel(); ++i) {
    uint16_t stored;
    std::memcpy(&stored, e.data + 2 * i, 2);
    uint16_t again;
    std::memcpy(&again, static_cast<const char*>(narrow.view().data) + 2 * i, 2);
    uint16_t direct;
    std::memcpy(&direct, static_cast<const char*>(back.view().data) + 2 * i, 2);
    check(direct == stored, "reading 16-bit storage as itself changed its bits");
    if (!is_nan16(stored, bf16)) check(again == stored, "16-bit -> f32 -> 16-bit changed a value");
    if (bf16) {
      uint32_t w;
      std::memcpy(&w, wide.data<float>() + i, 4);
      check(w == static_cast<uint32_t>(stored) << 16, "bf16 -> f32 is not exact");
    }
  }
}

void read_all(const io::SafetensorsFile& f, const unsigned char* begin, size_t size) {
  for (const io::SafetensorsEntry& e : f.entries()) {
    check(e.data >= begin && e.data + e.nbytes() <= begin + size, "entry outside the file");
    check(f.find(e.name) == &e, "find() does not return the entry");
    fuzz::expect_input_error([&] {
      const bool float_storage =
          e.dtype == SafetensorsDtype::F32 || e.dtype == SafetensorsDtype::BF16 ||
          e.dtype == SafetensorsDtype::F16 || e.dtype == SafetensorsDtype::F64;
      if (float_storage) {
        for (DType as : {DType::F32, DType::BF16, DType::F16}) (void)f.read(e.name, as);
        if (e.dtype == SafetensorsDtype::BF16) check_round_trip(f, e, DType::BF16);
        if (e.dtype == SafetensorsDtype::F16) check_round_trip(f, e, DType::F16);
        if (e.dtype == SafetensorsDtype::F32) {
          const HostTensor t = f.read(e.name);
          check(e.numel() == 0 || std::memcmp(t.view().data, e.data, e.nbytes()) == 0,
                "f32 read is not bit-exact");
        }
      } else if (e.dtype == SafetensorsDtype::BOOL) {
        (void)f.read(e.name, DType::U8);
      } else {
        (void)f.read(e.name);  // I32, I64, U8 as themselves; others refused
      }
    });
    // A destination of another shape or of an integer type for float data: refused.
    fuzz::expect_input_error([&] {
      HostTensor wrong(DType::F32, Shape{e.numel() + 1});
      f.read_into(e.name, wrong.view());
      check(false, "read_into accepted a wrong shape");
    });
  }
  fuzz::expect_input_error([&] { (void)f.at("\xff no such tensor"); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::ScratchDir dir;
  std::string from_memory, from_file;
  std::vector<std::string> names_memory, names_file;
  try {
    const auto f = io::SafetensorsFile::view("model.safetensors", data, size);
    for (const auto& e : f.entries()) names_memory.push_back(e.name);
    read_all(f, data, size);
  } catch (const InputError& e) {
    from_memory = e.what();
  }

  const std::string path = dir / "model.safetensors";
  dir.reset({{"model.safetensors", std::string(reinterpret_cast<const char*>(data), size)}});
  try {
    const auto f = io::SafetensorsFile::open(path);
    for (const auto& e : f.entries()) names_file.push_back(e.name);
    // The mapped bytes, once: the rest of read_all's checks ran on the in-memory copy.
    for (const auto& e : f.entries())
      fuzz::expect_input_error([&] { (void)f.read(e.name, DType::F32); });
  } catch (const InputError& e) {
    from_file = e.what();
  }
  // Same outcome; messages differ only by the path.
  check(from_memory.empty() == from_file.empty(), "view() and open() disagree");
  check(names_memory == names_file || !from_file.empty(), "view() and open() see other tensors");
  return 0;
}
