// safetensors writer, byte-compatible with the reference (Rust) writer behind
// safetensors.torch.save_file: compact JSON header with "__metadata__" first, tensors ordered by
// descending dtype (the reference's Dtype enum order) then by name and packed without gaps, the
// header padded with spaces to a multiple of 8 bytes. Tensors stream through an AtomicFileWriter,
// converted a chunk at a time, so saving never holds a second copy of the model.
#include <algorithm>
#include <cstring>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

namespace ftune::io {
namespace {

using nlohmann::json;

// serde_json's escaping: ", \ and control characters (\b \f \n \r \t, others as \u00xx), every
// other byte as is (UTF-8 stays UTF-8). nlohmann without ensure_ascii produces the same bytes.
std::string json_string(const std::string& path, const std::string& s, const char* what) {
  try {
    return json(s).dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception&) {
    throw InputError(fmt::format("cannot write {}: {} {} is not valid UTF-8", path, what,
                                 json(s).dump(-1, ' ', true, json::error_handler_t::replace)));
  }
}

struct Planned {
  const SafetensorsTensor* tensor;
  DType stored;
  uint64_t begin, end;
};

}  // namespace

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<Planned> plan;
  std::set<std::string_view> names;
  for (const SafetensorsTensor& t : tensors) {
    if (t.name == "__metadata__")
      throw InputError(
          fmt::format("cannot write {}: \"__metadata__\" is reserved, not a tensor name", path));
    if (!names.insert(t.name).second)
      throw InputError(fmt::format("cannot write {}: tensor '{}' is given twice", path, t.name));
    const DType stored = t.store_as.value_or(t.view.dtype);
    const bool float_pair =
        (stored == DType::F32 || stored == DType::BF16 || stored == DType::F16) &&
        (t.view.dtype == DType::F32 || t.view.dtype == DType::BF16 || t.view.dtype == DType::F16);
    if (stored != t.view.dtype && !float_pair)
      throw InputError(
          fmt::format("cannot write {}: tensor '{}' holds {} and cannot be stored as {}", path,
                      t.name, dtype_name(t.view.dtype), dtype_name(stored)));
    if (!t.view.is_contiguous())
      throw ShapeError(fmt::format("write_safetensors: tensor '{}' ({}) must be contiguous", t.name,
                                   t.view.describe()));
    if (t.view.numel() > 0 && !t.view.defined())
      throw ShapeError(fmt::format("write_safetensors: tensor '{}' ({}) has no memory", t.name,
                                   t.view.describe()));
    plan.push_back({&t, stored, 0, 0});
  }
  // Descending dtype (reference enum order), then name: what the reference writer does.
  std::sort(plan.begin(), plan.end(), [](const Planned& a, const Planned& b) {
    const auto da = safetensors_dtype(a.stored), db = safetensors_dtype(b.stored);
    if (da != db) return da > db;
    return a.tensor->name < b.tensor->name;
  });
  uint64_t offset = 0;
  for (Planned& p : plan) {
    p.begin = offset;
    offset += static_cast<uint64_t>(p.tensor->view.numel()) * dtype_size(p.stored);
    p.end = offset;
  }

  std::map<std::string, std::string> meta = metadata;
  meta.emplace("format", "pt");  // keeps a caller's "format"
  std::string header = "{\"__metadata__\":{";
  bool first = true;
  for (const auto& [k, v] : meta) {
    if (!first) header += ',';
    header += json_string(path, k, "metadata key");
    header += ':';
    header += json_string(path, v, "metadata value");
    first = false;
  }
  header += "}";
  for (const Planned& p : plan) {
    std::string shape;
    for (int i = 0; i < p.tensor->view.rank(); ++i) {
      if (i) shape += ',';
      shape += std::to_string(p.tensor->view.shape[i]);
    }
    header +=
        fmt::format(",{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                    json_string(path, p.tensor->name, "tensor name"),
                    safetensors_dtype_name(safetensors_dtype(p.stored)), shape, p.begin, p.end);
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  AtomicFileWriter out(path);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  out.write(len, sizeof(len));
  out.write(header);

  constexpr int64_t kChunk = 1 << 16;          // elements per transfer / conversion
  std::vector<uint32_t> src_stage, dst_stage;  // 4-byte aligned host staging
  auto stage = [](std::vector<uint32_t>& v, int64_t count, DType dtype) {
    v.resize((static_cast<size_t>(count) * dtype_size(dtype) + 3) / 4);
    return v.data();
  };
  for (const Planned& p : plan) {
    const TensorView src = p.tensor->view;
    const int64_t n = src.numel();
    if (n == 0) continue;
    if (src.device.is_cpu() && p.stored == src.dtype) {
      out.write(src.data, src.nbytes());
      continue;
    }
    // Device memory comes to the host a chunk at a time; dtype changes convert per chunk.
    for (int64_t off = 0; off < n; off += kChunk) {
      const int64_t count = std::min(kChunk, n - off);
      TensorView part = src.flat_range(off, count);
      if (!src.device.is_cpu()) {
        const TensorView staged(stage(src_stage, count, src.dtype), src.dtype, Device::cpu(),
                                Shape{count});
        copy(staged, part);
        part = staged;
      }
      if (p.stored != src.dtype) {
        const TensorView converted(stage(dst_stage, count, p.stored), p.stored, Device::cpu(),
                                   Shape{count});
        convert(converted, part);
        part = converted;
      }
      out.write(part.data, part.nbytes());
    }
  }
  out.commit();
}

}  // namespace ftune::io
