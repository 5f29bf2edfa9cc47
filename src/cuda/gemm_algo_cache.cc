// The GEMM algorithm cache file (see gemm_algo_cache.h): keys, JSON (de)serialisation, and the
// locked read-merge-write that lets many processes share one file.
#include "cuda/gemm_algo_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json_file.h"

namespace ftune::cuda {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "ftune-gemm-algorithms";

json gemm_algo_key_to_json(const GemmAlgoKey& key);
GemmAlgoKey gemm_algo_key_from_json(const json& j, const std::string& where);

DType gemm_dtype_from_name(const std::string& name, const std::string& where) {
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    if (dtype_name(t) == name) return t;
  throw InputError(fmt::format("{}: unknown GEMM element type \"{}\" (expected f32, bf16 or f16)",
                               where, name));
}

GemmEpilogue epilogue_from_name(const std::string& name, const std::string& where) {
  for (int e = 0; e <= static_cast<int>(GemmEpilogue::BgradOpA); ++e)
    if (gemm_epilogue_name(static_cast<GemmEpilogue>(e)) == name)
      return static_cast<GemmEpilogue>(e);
  throw InputError(fmt::format("{}: unknown GEMM epilogue \"{}\"", where, name));
}

std::string algo_word(uint64_t w) {
  return fmt::format("0x{:016x}", w);
}

uint64_t parse_algo_word(const json& j, const std::string& where) {
  if (!j.is_string())
    throw InputError(fmt::format("{}: algo words must be strings \"0x<16 hex digits>\", got {}",
                                 where, io::json_type_name(j)));
  const std::string s = j.get<std::string>();
  if (s.size() != 18 || s[0] != '0' || s[1] != 'x' ||
      s.find_first_not_of("0123456789abcdefABCDEF", 2) != std::string::npos)
    throw InputError(
        fmt::format("{}: algo word \"{}\" is not \"0x\" and 16 hex digits", where, s));
  return std::stoull(s.substr(2), nullptr, 16);
}

json entry_to_json(const GemmAlgoKey& key, const GemmAlgoEntry& e) {
  json algo = json::array();
  for (uint64_t w : e.algo) algo.push_back(algo_word(w));
  return json{{"key", gemm_algo_key_to_json(key)},
              {"algo", algo},
              {"time_us", e.time_us},
              {"candidates", e.candidates}};
}

// Entries of a parsed file; InputError (naming `path` and what is wrong) for anything unexpected.
std::map<std::string, std::pair<GemmAlgoKey, GemmAlgoEntry>> entries_from_json(
    const json& j, const std::string& path) {
  if (!j.is_object())
    throw InputError(fmt::format("{}: expected a JSON object, got {}", path, io::json_type_name(j)));
  const std::string format = io::get_string(j, "format", path);
  if (format != kFormat)
    throw InputError(fmt::format("{}: format \"{}\" is not \"{}\"", path, format, kFormat));
  const int64_t version = io::get_int(j, "version", path);
  if (version != kGemmAlgoCacheVersion)
    throw InputError(fmt::format("{}: version {} is not the version this ftune writes ({})", path,
                                 version, kGemmAlgoCacheVersion));
  if (!j.contains("entries") || !j["entries"].is_array())
    throw InputError(fmt::format("{}: key 'entries' must be an array", path));
  std::map<std::string, std::pair<GemmAlgoKey, GemmAlgoEntry>> out;
  const json& entries = j["entries"];
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string where = fmt::format("{}: entries[{}]", path, i);
    const json& e = entries[i];
    if (!e.is_object() || !e.contains("key") || !e.contains("algo"))
      throw InputError(fmt::format("{}: expected an object with 'key' and 'algo'", where));
    GemmAlgoKey key = gemm_algo_key_from_json(e["key"], where + ".key");
    GemmAlgoEntry entry;
    const json& algo = e["algo"];
    if (!algo.is_array() || algo.size() != entry.algo.size())
      throw InputError(fmt::format("{}: 'algo' must be an array of {} words", where,
                                   entry.algo.size()));
    for (size_t w = 0; w < entry.algo.size(); ++w)
      entry.algo[w] = parse_algo_word(algo[w], where + ".algo");
    entry.time_us = io::get_optional_float(e, "time_us", where).value_or(0.0);
    entry.candidates = static_cast<int>(io::get_optional_int(e, "candidates", where).value_or(0));
    std::string s = key.str();
    out[s] = {std::move(key), entry};
  }
  return out;
}

// Reads and parses the file; nullopt when it does not exist. InputError for any other problem.
std::optional<std::map<std::string, std::pair<GemmAlgoKey, GemmAlgoEntry>>> read_entries(
    const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  const std::string text = io::read_file(path);
  return entries_from_json(io::parse_json(text, path), path);
}

// An exclusive flock on "<path>.lock", held for the object's life. The lock file is separate from
// the data file because the data file is replaced by rename (a lock on it would guard a stale
// inode).
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    const std::string lock_path = path + ".lock";
    fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ < 0)
      throw InputError(fmt::format("cannot open lock file {}: {}", lock_path, std::strerror(errno)));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd_);
      throw InputError(fmt::format("cannot lock {}: {}", lock_path, std::strerror(err)));
    }
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

std::string GemmAlgoKey::str() const {
  return fmt::format("{}|sm{}|cublaslt{}|{}{}|M{} N{} K{}|ld {} {} {}|{} {} {} bias {}|{}|tf32 {}|align {} {} {} {}",
                     device, sm, cublaslt_version, trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N,
                     K, lda, ldb, ldc, dtype_name(a_type), dtype_name(b_type),
                     dtype_name(c_type), dtype_name(bias_type), gemm_epilogue_name(epilogue),
                     tf32 ? 1 : 0, align_a, align_b, align_c, align_bias);
}

int64_t gemm_size_bucket(int64_t d) {
  if (d <= 64) return d;
  int top = 0;  // floor(log2(d))
  while ((d >> (top + 1)) != 0) ++top;
  const int64_t step = int64_t{1} << (top - 2);
  return (d + step - 1) / step * step;
}

uint32_t gemm_alignment_class(const void* p) {
  if (!p) return 0;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 16;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

namespace {

json gemm_algo_key_to_json(const GemmAlgoKey& k) {
  return json{{"device", k.device},
              {"sm", k.sm},
              {"cublaslt_version", k.cublaslt_version},
              {"trans_a", k.trans_a},
              {"trans_b", k.trans_b},
              {"M", k.M},
              {"N", k.N},
              {"K", k.K},
              {"lda", k.lda},
              {"ldb", k.ldb},
              {"ldc", k.ldc},
              {"a_type", std::string(dtype_name(k.a_type))},
              {"b_type", std::string(dtype_name(k.b_type))},
              {"c_type", std::string(dtype_name(k.c_type))},
              {"bias_type", std::string(dtype_name(k.bias_type))},
              {"epilogue", std::string(gemm_epilogue_name(k.epilogue))},
              {"tf32", k.tf32},
              {"align", {k.align_a, k.align_b, k.align_c, k.align_bias}}};
}

GemmAlgoKey gemm_algo_key_from_json(const json& j, const std::string& where) {
  if (!j.is_object())
    throw InputError(fmt::format("{}: expected an object, got {}", where, io::json_type_name(j)));
  GemmAlgoKey k;
  k.device = io::get_string(j, "device", where);
  k.sm = static_cast<int>(io::get_int(j, "sm", where));
  k.cublaslt_version = io::get_int(j, "cublaslt_version", where);
  k.trans_a = io::get_bool(j, "trans_a", where);
  k.trans_b = io::get_bool(j, "trans_b", where);
  k.M = io::get_int(j, "M", where);
  k.N = io::get_int(j, "N", where);
  k.K = io::get_int(j, "K", where);
  k.lda = io::get_int(j, "lda", where);
  k.ldb = io::get_int(j, "ldb", where);
  k.ldc = io::get_int(j, "ldc", where);
  k.a_type = gemm_dtype_from_name(io::get_string(j, "a_type", where), where + ".a_type");
  k.b_type = gemm_dtype_from_name(io::get_string(j, "b_type", where), where + ".b_type");
  k.c_type = gemm_dtype_from_name(io::get_string(j, "c_type", where), where + ".c_type");
  k.bias_type =
      gemm_dtype_from_name(io::get_string(j, "bias_type", where), where + ".bias_type");
  k.epilogue = epilogue_from_name(io::get_string(j, "epilogue", where), where + ".epilogue");
  k.tf32 = io::get_bool(j, "tf32", where);
  const json* align = j.contains("align") ? &j["align"] : nullptr;
  if (!align || !align->is_array() || align->size() != 4)
    throw InputError(fmt::format("{}: key 'align' must be an array of 4 integers", where));
  uint32_t* fields[4] = {&k.align_a, &k.align_b, &k.align_c, &k.align_bias};
  for (size_t i = 0; i < 4; ++i) {
    const json& v = (*align)[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 256)
      throw InputError(fmt::format("{}: key 'align' must hold integers in [0, 256]", where));
    *fields[i] = static_cast<uint32_t>(v.get<int64_t>());
  }
  return k;
}

}  // namespace

GemmAlgoCache::GemmAlgoCache(std::string path) : path_(std::move(path)) {}

std::optional<std::string> GemmAlgoCache::load() {
  if (path_.empty()) return std::nullopt;
  try {
    auto file = read_entries(path_);
    if (!file) return std::nullopt;
    for (auto& [s, kv] : *file)
      if (!ours_.count(s)) entries_[s] = kv;
    return std::nullopt;
  } catch (const std::exception& e) {
    std::string msg = fmt::format(
        "GEMM algorithm cache {} ignored (it will be rebuilt): {}", path_, e.what());
    spdlog::warn("{}", msg);
    return msg;
  }
}

const GemmAlgoEntry* GemmAlgoCache::find(const GemmAlgoKey& key) const {
  auto it = entries_.find(key.str());
  return it == entries_.end() ? nullptr : &it->second.second;
}

void GemmAlgoCache::put(const GemmAlgoKey& key, const GemmAlgoEntry& entry) {
  std::string s = key.str();
  ours_.insert(s);
  entries_[s] = {key, entry};
}

std::optional<std::string> GemmAlgoCache::save() {
  if (path_.empty()) return std::nullopt;
  try {
    const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    FileLock lock(path_);
    // What other processes wrote since we last looked (a corrupt file contributes nothing).
    try {
      if (auto file = read_entries(path_))
        for (auto& [s, kv] : *file)
          if (!ours_.count(s)) entries_[s] = kv;
    } catch (const std::exception& e) {
      spdlog::warn("GEMM algorithm cache {} is being rebuilt: {}", path_, e.what());
    }
    json entries = json::array();
    for (const auto& [s, kv] : entries_) entries.push_back(entry_to_json(kv.first, kv.second));
    const json doc{{"format", kFormat}, {"version", kGemmAlgoCacheVersion}, {"entries", entries}};
    io::write_json_atomic(path_, doc);
    return std::nullopt;
  } catch (const std::exception& e) {
    std::string msg = fmt::format("cannot save the GEMM algorithm cache {}: {}", path_, e.what());
    spdlog::warn("{}", msg);
    return msg;
  }
}

std::string gemm_cache_path() {
  if (const char* v = std::getenv("FTUNE_GEMM_CACHE")) return v;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && xdg[0] == '/')
    return std::string(xdg) + "/ftune/gemm_algorithms.json";
  if (const char* home = std::getenv("HOME"); home && home[0])
    return std::string(home) + "/.cache/ftune/gemm_algorithms.json";
  return "";
}

size_t gemm_cache_entries() {
  const std::string path = gemm_cache_path();
  if (path.empty()) return 0;
  try {
    auto file = read_entries(path);
    return file ? file->size() : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

void gemm_autotune_log(const std::string& message, bool info) {
  if (info) spdlog::info("gemm autotune: {}", message);
  else spdlog::debug("gemm autotune: {}", message);
}

bool gemm_autotune_enabled() {
  const char* v = std::getenv("FTUNE_GEMM_AUTOTUNE");
  if (!v) return true;
  const std::string s = v;
  return !(s == "0" || s == "false" || s == "off" || s == "no");
}

}  // namespace ftune::cuda
