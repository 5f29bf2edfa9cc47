// safetensors reader: dtype table, header validation over a memory map, and conversion of stored
// tensors into ftune views. Every check happens in open(), before any tensor is handed out.
#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_file.h"

namespace ftune::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; big-endian hosts would need byte swaps");

namespace {

using nlohmann::json;

// The reference implementation refuses larger headers; so do we (a corrupt length would
// otherwise make us parse gigabytes of tensor data as JSON).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeInfo {
  SafetensorsDtype dtype;
  std::string_view name;
  size_t bits;
};

constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::BOOL, "BOOL", 8},       {SafetensorsDtype::F4, "F4", 4},
    {SafetensorsDtype::F6_E2M3, "F6_E2M3", 6}, {SafetensorsDtype::F6_E3M2, "F6_E3M2", 6},
    {SafetensorsDtype::U8, "U8", 8},           {SafetensorsDtype::I8, "I8", 8},
    {SafetensorsDtype::F8_E5M2, "F8_E5M2", 8}, {SafetensorsDtype::F8_E4M3, "F8_E4M3", 8},
    {SafetensorsDtype::F8_E8M0, "F8_E8M0", 8}, {SafetensorsDtype::I16, "I16", 16},
    {SafetensorsDtype::U16, "U16", 16},        {SafetensorsDtype::F16, "F16", 16},
    {SafetensorsDtype::BF16, "BF16", 16},      {SafetensorsDtype::I32, "I32", 32},
    {SafetensorsDtype::U32, "U32", 32},        {SafetensorsDtype::F32, "F32", 32},
    {SafetensorsDtype::C64, "C64", 64},        {SafetensorsDtype::F64, "F64", 64},
    {SafetensorsDtype::I64, "I64", 64},        {SafetensorsDtype::U64, "U64", 64},
};

std::string known_dtype_list() {
  std::string s;
  for (const DtypeInfo& d : kDtypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// A short description of a JSON value for error messages. Never recurses into containers (a
// hostile header may nest millions of levels), and cuts long scalars.
std::string describe(const json& j) {
  const auto cut = [](std::string s) {
    if (s.size() > 80) s.replace(77, std::string::npos, "...");
    return s;
  };
  if (j.is_array() || j.is_object()) {
    if (j.size() <= 8 &&
        std::all_of(j.begin(), j.end(), [](const json& e) { return e.is_primitive(); })) {
      return cut(j.dump(-1, ' ', false, json::error_handler_t::replace));
    }
    return fmt::format("{} of {} elements", j.type_name(), j.size());
  }
  return fmt::format("{} {}", j.type_name(),
                     cut(j.dump(-1, ' ', false, json::error_handler_t::replace)));
}

// Printable form of a tensor name read from a file (which may hold any bytes).
std::string show_name(std::string_view name) {
  std::string s = json(std::string(name)).dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 200) s.replace(197, std::string::npos, "...");
  return s;
}

uint64_t read_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses the header, noting keys that appear twice (JSON parsers keep only one of them, which
// would silently drop a tensor).
json parse_header(const std::string& path, const char* begin, const char* end) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::string top_key;                      // the tensor entry being parsed
  std::string duplicate;
  json header;
  try {
    header = json::parse(begin, end, [&](int /*depth*/, json::parse_event_t event, json& parsed) {
      switch (event) {
        case json::parse_event_t::object_start:
          keys.emplace_back();
          break;
        case json::parse_event_t::object_end:
          keys.pop_back();
          break;
        case json::parse_event_t::key: {
          const std::string& key = parsed.get_ref<const std::string&>();
          if (keys.size() == 1) top_key = key;
          if (!keys.back().insert(key).second && duplicate.empty()) {
            duplicate = keys.size() == 1
                            ? fmt::format("tensor {} appears twice in the header", show_name(key))
                            : fmt::format("key {} appears twice in the entry of {}", show_name(key),
                                          show_name(top_key));
          }
          break;
        }
        default:
          break;
      }
      return true;
    });
  } catch (const json::parse_error& e) {
    throw InputError(
        fmt::format("{}: the safetensors header is not valid JSON (at byte {} of "
                    "the header): {}",
                    path, e.byte, parse_error_detail(e)));
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: the safetensors header is not valid JSON: {}", path,
                                 parse_error_detail(e)));
  }
  if (!duplicate.empty()) throw InputError(fmt::format("{}: {}", path, duplicate));
  return header;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& j) {
  std::map<std::string, std::string> out;
  if (j.is_null()) return out;
  if (!j.is_object())
    throw InputError(
        fmt::format("{}: __metadata__ must be an object of strings, got {}", path, describe(j)));
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_string())
      throw InputError(fmt::format("{}: __metadata__ key {} must hold a string, got {}", path,
                                   show_name(it.key()), describe(it.value())));
    out.emplace(it.key(), it.value().get<std::string>());
  }
  return out;
}

// Reads a JSON array of non-negative integers (shape, data_offsets).
bool to_uints(const json& j, std::vector<uint64_t>& out) {
  if (!j.is_array()) return false;
  out.clear();
  for (const json& e : j) {
    if (!e.is_number_unsigned()) return false;  // nlohmann stores non-negative integers unsigned
    out.push_back(e.get<uint64_t>());
  }
  return true;
}

SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const json& j,
                             const unsigned char* buffer, uint64_t buffer_size) {
  const std::string t = show_name(name);
  if (!j.is_object())
    throw InputError(
        fmt::format("{}: tensor {}: expected an object with dtype, shape and data_offsets, got {}",
                    path, t, describe(j)));
  SafetensorsEntry e;
  e.name = name;

  const auto dtype_it = j.find("dtype");
  if (dtype_it == j.end() || !dtype_it->is_string())
    throw InputError(fmt::format("{}: tensor {}: 'dtype' must be a string such as \"F32\", got {}",
                                 path, t, dtype_it == j.end() ? "nothing" : describe(*dtype_it)));
  const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
  const auto dtype = parse_safetensors_dtype(dtype_name);
  if (!dtype)
    throw InputError(fmt::format("{}: tensor {} has unknown dtype {} (expected one of {})", path, t,
                                 show_name(dtype_name), known_dtype_list()));
  e.dtype = *dtype;

  std::vector<uint64_t> dims;
  const auto shape_it = j.find("shape");
  if (shape_it == j.end() || !to_uints(*shape_it, dims))
    throw InputError(
        fmt::format("{}: tensor {}: 'shape' must be an array of non-negative "
                    "integers, got {}",
                    path, t, shape_it == j.end() ? "nothing" : describe(*shape_it)));
  // The product of the non-zero dimensions bounds every stride of the tensor: it must fit in
  // int64 even when a zero dimension makes the tensor empty ([0, 2^62, 4] would overflow them).
  uint64_t numel = 1, extent = 1;
  bool overflow = false;
  for (uint64_t d : dims) {
    numel *= d;  // no wrap: numel <= extent, checked below
    overflow |= d != 0 && __builtin_mul_overflow(extent, d, &extent);
    overflow |= extent > static_cast<uint64_t>(INT64_MAX);
    e.shape.push_back(static_cast<int64_t>(d));
  }
  if (overflow)
    throw InputError(fmt::format(
        "{}: tensor {} has shape {}, whose dimensions multiply past 2^63 (corrupt header)", path, t,
        fmt::format("[{}]", fmt::join(dims, ", "))));

  std::vector<uint64_t> offsets;
  const auto off_it = j.find("data_offsets");
  if (off_it == j.end() || !to_uints(*off_it, offsets) || offsets.size() != 2)
    throw InputError(
        fmt::format("{}: tensor {}: 'data_offsets' must be [begin, end] with "
                    "non-negative integers, got {}",
                    path, t, off_it == j.end() ? "nothing" : describe(*off_it)));
  e.begin = offsets[0];
  e.end = offsets[1];
  if (e.begin > e.end)
    throw InputError(fmt::format("{}: tensor {}: data_offsets [{}, {}] begin after they end", path,
                                 t, e.begin, e.end));

  // Size in bits first: sub-byte dtypes (F4, F6) must fill whole bytes.
  uint64_t bits = 0;
  overflow |= __builtin_mul_overflow(numel, safetensors_dtype_bits(e.dtype), &bits);
  if (overflow || bits % 8 != 0 || bits / 8 != e.end - e.begin) {
    const std::string need = overflow   ? std::string("more bytes than any file holds")
                             : bits % 8 ? fmt::format("{} bits, not a whole number of bytes", bits)
                                        : fmt::format("{} bytes", bits / 8);
    throw InputError(fmt::format(
        "{}: tensor {} of dtype {} and shape {} needs {}, but data_offsets [{}, {}] hold {} bytes",
        path, t, dtype_name, e.shape_str(), need, e.begin, e.end, e.end - e.begin));
  }
  if (e.end > buffer_size)
    throw InputError(fmt::format(
        "{}: tensor {}: data_offsets [{}, {}] lie outside the data buffer of {} bytes (the file is "
        "truncated or corrupt)",
        path, t, e.begin, e.end, buffer_size));
  e.data = buffer + e.begin;
  return e;
}

// Tensors must not share bytes (zero-size tensors hold none, so they may sit anywhere). Gaps
// between tensors are tolerated: they are harmless, though the reference writer leaves none.
void check_overlaps(const std::string& path, const std::vector<SafetensorsEntry>& entries) {
  std::vector<const SafetensorsEntry*> by_offset;
  for (const SafetensorsEntry& e : entries)
    if (e.end > e.begin) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const SafetensorsEntry& a = *by_offset[i - 1];
    const SafetensorsEntry& b = *by_offset[i];
    if (b.begin < a.end)
      throw InputError(
          fmt::format("{}: tensors {} (bytes [{}, {})) and {} (bytes [{}, {})) overlap", path,
                      show_name(a.name), a.begin, a.end, show_name(b.name), b.begin, b.end));
  }
}

bool is_float_storage(SafetensorsDtype d) {
  return d == SafetensorsDtype::F32 || d == SafetensorsDtype::BF16 || d == SafetensorsDtype::F16 ||
         d == SafetensorsDtype::F64;
}

bool is_float_dtype(DType d) {
  return d == DType::F32 || d == DType::BF16 || d == DType::F16;
}

// Converts a host, contiguous dst from the entry's bytes, a chunk at a time through an aligned
// staging buffer (the mapped bytes may be unaligned; the chunk keeps the staging buffer small).
void convert_host(const SafetensorsEntry& e, TensorView dst) {
  constexpr int64_t kChunk = 1 << 14;
  const int64_t n = e.numel();
  if (e.dtype == SafetensorsDtype::F64) {
    std::vector<double> wide(static_cast<size_t>(std::min(n, kChunk)));
    std::vector<float> narrow(wide.size());
    for (int64_t off = 0; off < n; off += kChunk) {
      const int64_t count = std::min(kChunk, n - off);
      std::memcpy(wide.data(), e.data + off * 8, static_cast<size_t>(count) * 8);
      for (int64_t i = 0; i < count; ++i) narrow[i] = static_cast<float>(wide[i]);  // nearest even
      convert(dst.flat_range(off, count),
              TensorView(narrow.data(), DType::F32, Device::cpu(), Shape{count}));
    }
    return;
  }
  const DType src_dtype = *ftune_dtype(e.dtype);
  const size_t esize = dtype_size(src_dtype);
  std::vector<uint32_t> stage(static_cast<size_t>(std::min(n, kChunk)));  // 4-byte aligned
  for (int64_t off = 0; off < n; off += kChunk) {
    const int64_t count = std::min(kChunk, n - off);
    std::memcpy(stage.data(), e.data + off * esize, static_cast<size_t>(count) * esize);
    convert(dst.flat_range(off, count),
            TensorView(stage.data(), src_dtype, Device::cpu(), Shape{count}));
  }
}

}  // namespace

std::string_view safetensors_dtype_name(SafetensorsDtype dtype) {
  for (const DtypeInfo& d : kDtypes)
    if (d.dtype == dtype) return d.name;
  return "?";
}

std::optional<SafetensorsDtype> parse_safetensors_dtype(std::string_view name) {
  for (const DtypeInfo& d : kDtypes)
    if (d.name == name) return d.dtype;
  return std::nullopt;
}

size_t safetensors_dtype_bits(SafetensorsDtype dtype) {
  for (const DtypeInfo& d : kDtypes)
    if (d.dtype == dtype) return d.bits;
  return 0;
}

std::optional<DType> ftune_dtype(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::F32:
      return DType::F32;
    case SafetensorsDtype::BF16:
      return DType::BF16;
    case SafetensorsDtype::F16:
      return DType::F16;
    case SafetensorsDtype::I32:
      return DType::I32;
    case SafetensorsDtype::I64:
      return DType::I64;
    case SafetensorsDtype::U8:
      return DType::U8;
    default:
      return std::nullopt;
  }
}

SafetensorsDtype safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return SafetensorsDtype::F32;
    case DType::BF16:
      return SafetensorsDtype::BF16;
    case DType::F16:
      return SafetensorsDtype::F16;
    case DType::I32:
      return SafetensorsDtype::I32;
    case DType::I64:
      return SafetensorsDtype::I64;
    case DType::U8:
      return SafetensorsDtype::U8;
  }
  FTUNE_ASSERT(false, "unknown DType {}", static_cast<int>(dtype));
  return SafetensorsDtype::F32;
}

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated on open: cannot overflow for an opened file
  return n;
}

std::string SafetensorsEntry::shape_str() const {
  return format_shape(shape);
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.file_ = MappedFile::open(path);
  f.path_ = path;
  f.parse(f.file_.data(), f.file_.size());
  return f;
}

SafetensorsFile SafetensorsFile::view(std::string name, const unsigned char* data, size_t size) {
  SafetensorsFile f;
  f.path_ = std::move(name);
  f.parse(data, size);
  return f;
}

void SafetensorsFile::parse(const unsigned char* bytes, uint64_t size) {
  const std::string& path = path_;
  if (size < 8)
    throw InputError(
        fmt::format("{}: not a safetensors file: {} bytes long, expected at least 8 "
                    "(the header length)",
                    path, size));
  const uint64_t header_len = read_le64(bytes);
  if (header_len > kMaxHeaderBytes)
    throw InputError(
        fmt::format("{}: not a safetensors file or corrupt: header length {} exceeds "
                    "the {}-byte limit",
                    path, header_len, kMaxHeaderBytes));
  if (header_len > size - 8)
    throw InputError(
        fmt::format("{}: truncated or corrupt: header length {} exceeds the {} bytes "
                    "that follow it",
                    path, header_len, size - 8));
  const char* header_begin = reinterpret_cast<const char*>(bytes + 8);
  const json header = parse_header(path, header_begin, header_begin + header_len);
  if (!header.is_object())
    throw InputError(fmt::format("{}: the safetensors header must be a JSON object, got {}", path,
                                 describe(header)));

  const unsigned char* buffer = bytes + 8 + header_len;
  const uint64_t buffer_size = size - 8 - header_len;
  for (auto it = header.begin(); it != header.end(); ++it) {  // sorted by key (std::map)
    if (it.key() == "__metadata__") {
      metadata_ = parse_metadata(path, it.value());
      continue;
    }
    entries_.push_back(parse_entry(path, it.key(), it.value(), buffer, buffer_size));
  }
  check_overlaps(path, entries_);
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  const auto it =
      std::lower_bound(entries_.begin(), entries_.end(), name,
                       [](const SafetensorsEntry& e, std::string_view n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

const SafetensorsEntry& SafetensorsFile::at(std::string_view name) const {
  const SafetensorsEntry* e = find(name);
  if (!e)
    throw InputError(fmt::format("{}: no tensor named {} (the file holds {} tensors)", path(),
                                 show_name(name), entries_.size()));
  return *e;
}

void SafetensorsFile::read_into(std::string_view name, TensorView dst) const {
  read_entry_into(at(name), path(), dst);
}

HostTensor SafetensorsFile::read(std::string_view name, std::optional<DType> as) const {
  const SafetensorsEntry& e = at(name);
  if (!as) as = ftune_dtype(e.dtype);
  if (!as)
    throw InputError(fmt::format("{}: tensor {} is stored as {}, which ftune has no dtype for",
                                 path(), show_name(name), safetensors_dtype_name(e.dtype)));
  if (e.shape.size() > static_cast<size_t>(kMaxRank))
    throw InputError(fmt::format("{}: tensor {} has rank {} (shape {}), ftune supports at most {}",
                                 path(), show_name(name), e.shape.size(), e.shape_str(), kMaxRank));
  HostTensor out(*as, Shape(e.shape.begin(), e.shape.end()));
  read_entry_into(e, path(), out.view());
  return out;
}

void read_entry_into(const SafetensorsEntry& e, const std::string& file, TensorView dst) {
  const std::string t = show_name(e.name);
  const Shape& s = dst.shape;
  const bool same_shape = static_cast<size_t>(s.rank()) == e.shape.size() &&
                          std::equal(e.shape.begin(), e.shape.end(), s.begin());
  if (!same_shape)
    throw InputError(
        fmt::format("tensor {} in {} has shape {}, expected {}", t, file, e.shape_str(), s.str()));
  const bool float_pair = is_float_storage(e.dtype) && is_float_dtype(dst.dtype);
  const bool exact_pair = ftune_dtype(e.dtype) == dst.dtype ||
                          (e.dtype == SafetensorsDtype::BOOL && dst.dtype == DType::U8);
  if (!float_pair && !exact_pair)
    throw InputError(fmt::format(
        "tensor {} in {} is stored as {}, which cannot be read into {} (floats F32/F16/BF16/F64 "
        "convert to f32/bf16/f16; I32, I64 and U8 read as themselves, BOOL as u8)",
        t, file, safetensors_dtype_name(e.dtype), dtype_name(dst.dtype)));
  if (!dst.is_contiguous())
    throw ShapeError("read_into: destination " + dst.describe() + " must be contiguous");
  if (e.numel() == 0) return;
  if (!dst.defined())
    throw ShapeError("read_into: destination " + dst.describe() + " has no memory");

  if (!dst.device.is_cpu()) {  // stage on the host, then one transfer
    HostTensor staging(dst.dtype, dst.shape);
    read_entry_into(e, file, staging.view());
    copy(dst, staging.view());
    return;
  }
  if (exact_pair) {
    std::memcpy(dst.data, e.data, e.nbytes());  // bit-exact, NaN payloads included
    return;
  }
  convert_host(e, dst);
}

std::optional<int64_t> first_nonfinite(const SafetensorsEntry& e) {
  const int64_t n = e.numel();
  const unsigned char* p = e.data;
  switch (e.dtype) {
    case SafetensorsDtype::F32:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t b;
        std::memcpy(&b, p + 4 * i, 4);
        if ((b & 0x7f800000u) == 0x7f800000u) return i;
      }
      return std::nullopt;
    case SafetensorsDtype::F16:
    case SafetensorsDtype::BF16: {
      const uint16_t mask = e.dtype == SafetensorsDtype::F16 ? 0x7c00 : 0x7f80;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        if ((h & mask) == mask) return i;
      }
      return std::nullopt;
    }
    case SafetensorsDtype::F64:
      for (int64_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        if (!(std::fabs(d) <= static_cast<double>(std::numeric_limits<float>::max()))) return i;
      }
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

namespace {

// Whether non-finite element i is a NaN (else an infinity) as stored.
bool stored_nan(const SafetensorsEntry& e, int64_t i) {
  switch (e.dtype) {
    case SafetensorsDtype::F32: {
      uint32_t b;
      std::memcpy(&b, e.data + 4 * i, 4);
      return (b & 0x007fffffu) != 0;
    }
    case SafetensorsDtype::F16:
    case SafetensorsDtype::BF16: {
      uint16_t h;
      std::memcpy(&h, e.data + 2 * i, 2);
      return (h & (e.dtype == SafetensorsDtype::F16 ? 0x03ff : 0x007f)) != 0;
    }
    default: {
      double d;
      std::memcpy(&d, e.data + 8 * i, 8);
      return std::isnan(d);
    }
  }
}

}  // namespace

void check_finite(const SafetensorsEntry& e, const std::string& file) {
  const std::optional<int64_t> i = first_nonfinite(e);
  if (!i) return;
  throw InputError(fmt::format(
      "{}: tensor '{}' holds {} (element {} of shape {}): the weights are diverged or corrupted; "
      "ftune refuses to load non-finite weights",
      file, e.name, stored_nan(e, *i) ? "NaN" : "an infinite value", *i, e.shape_str()));
}

}  // namespace ftune::io
