// The safetensors format (Hugging Face's weight files): an 8-byte little-endian header length N,
// N bytes of JSON header {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
// ..., "__metadata__": {"key": "value"}}, then the data buffer (offsets are relative to its start).
//
// The reader maps the file and validates every header entry before handing anything out, so a
// corrupt or hostile file raises InputError (naming the file, the tensor and what was expected)
// instead of reading out of bounds. The writer reproduces the reference (Rust/Python) writer byte
// for byte: compact JSON, metadata first, tensors laid out by descending dtype then by name, the
// header padded with spaces to a multiple of 8 — so a file saved by ftune equals the one
// `safetensors.torch.save_file` writes for the same tensors and metadata.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/memory.h"
#include "core/tensor.h"
#include "io/mapped_file.h"

namespace ftune::io {

// Every element type the format names, in the order of the reference implementation's Dtype enum
// (its writer sorts tensors by this order, descending, then by name).
enum class SafetensorsDtype : uint8_t {
  BOOL,
  F4,
  F6_E2M3,
  F6_E3M2,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  F8_E8M0,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  C64,
  F64,
  I64,
  U64,
};

std::string_view safetensors_dtype_name(SafetensorsDtype dtype);  // "F32", "BF16", ...
std::optional<SafetensorsDtype> parse_safetensors_dtype(std::string_view name);
size_t safetensors_dtype_bits(SafetensorsDtype dtype);  // 4 for F4, 6 for F6_*, 8 for BOOL...
// The ftune DType with the same storage (F32, BF16, F16, I32, I64, U8), nullopt for the others.
std::optional<DType> ftune_dtype(SafetensorsDtype dtype);
SafetensorsDtype safetensors_dtype(DType dtype);

// One validated header entry. `data` points into the mapping; it need not be aligned to the
// element size (files from other writers), so read through memcpy or read_into.
struct SafetensorsEntry {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets in the data buffer, [begin, end)
  uint64_t end = 0;
  const unsigned char* data = nullptr;

  size_t nbytes() const { return static_cast<size_t>(end - begin); }
  int64_t numel() const;
  std::string shape_str() const;  // "(2, 3)", "(3,)", "()"
};

// A mapped, validated safetensors file. Move-only; entries stay valid while it lives.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);
  // The same validation over bytes already in memory (`name` labels errors, as the path does for
  // open()); the bytes are not copied and must outlive the result.
  static SafetensorsFile view(std::string name, const unsigned char* data, size_t size);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // sorted by name
  const SafetensorsEntry* find(std::string_view name) const;                 // nullptr when absent
  const SafetensorsEntry& at(std::string_view name) const;  // InputError when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Reads tensor `name` into dst (contiguous, any device): the shapes must match exactly; F32,
  // F16, BF16 and F64 storage converts into an F32, BF16 or F16 dst with core/dtype.h's rounding;
  // I32, I64 and U8 (and BOOL into U8) copy into a dst of the same dtype.
  void read_into(std::string_view name, TensorView dst) const;
  // A new host tensor of the stored shape, as `as` (default: the stored dtype, which must then be
  // one ftune has).
  HostTensor read(std::string_view name, std::optional<DType> as = std::nullopt) const;

 private:
  void parse(const unsigned char* bytes, uint64_t size);

  MappedFile file_;  // unmapped for view()
  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Reads one entry (of the file `file`, named in errors) into dst; see SafetensorsFile::read_into.
void read_entry_into(const SafetensorsEntry& entry, const std::string& file, TensorView dst);

// The first NaN or infinite element of a float entry as stored (F32, F16, BF16; F64 also when
// beyond f32's range, which reading turns into an infinity): its flat index, or nullopt (always
// for integer dtypes). One pass over the mapped bytes.
std::optional<int64_t> first_nonfinite(const SafetensorsEntry& entry);
// Throws InputError naming the tensor, the file and the element when first_nonfinite finds one:
// weights that hold NaN or Inf (a diverged run, a corrupted file) are refused at load.
void check_finite(const SafetensorsEntry& entry, const std::string& file);

// A tensor to write: its name, the memory (contiguous, host or device) and, optionally, the dtype
// to store it as (F32/BF16/F16 convert among each other, e.g. f32 master weights saved as bf16).
struct SafetensorsTensor {
  std::string name;
  TensorView view;
  std::optional<DType> store_as;
};

// Writes a safetensors file atomically (io/atomic_file.h). "format": "pt" is added to the metadata
// unless the caller sets "format" (transformers refuses files without it). Names must be unique
// and not "__metadata__"; errors raise InputError naming the file.
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace ftune::io
