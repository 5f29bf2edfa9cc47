// Frozen weights packed for oneDNN's matmul primitive (see cpu_matmul.h): the API table loaded
// from libdnnl, the per-thread primitive cache, the packed weights and the blocked product.
#include "ops/cpu_matmul.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/op_profile.h"
#include "core/signal_stack.h"
#include "core/thread_pool.h"
#include "ops/cpu_gemm_library.h"

#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <oneapi/dnnl/dnnl.h>
#define FTUNE_ONEDNN_MATMUL 1
#endif

namespace ftune::cpu {
namespace {

thread_local PackedWeights* t_frozen = nullptr;
std::atomic<int> g_enabled{-1};  // -1: FTUNE_PACKED_MATMUL not read yet
std::atomic<int64_t> g_created{0}, g_reused{0};

}  // namespace

const char* matmul_precision_name(MatmulPrecision p) {
  return p == MatmulPrecision::BF16 ? "bf16" : "fp32";
}

MatmulPrecision parse_matmul_precision(const std::string& text, const std::string& what) {
  if (text == "fp32" || text == "f32") return MatmulPrecision::F32;
  if (text == "bf16") {
    if (!packed_matmul_supports(MatmulPrecision::BF16))
      throw InputError(what + " is 'bf16', but bf16 scoring cannot run here: " +
                       packed_matmul_unavailable_reason(MatmulPrecision::BF16));
    return MatmulPrecision::BF16;
  }
  throw InputError(what + " is '" + text + "': expected fp32 or bf16");
}

FrozenWeightsScope::FrozenWeightsScope(PackedWeights* weights) : previous_(t_frozen) {
  t_frozen = weights;
}
FrozenWeightsScope::~FrozenWeightsScope() {
  t_frozen = previous_;
}
PackedWeights* frozen_weights() {
  return t_frozen;
}

bool packed_matmul_enabled() {
  int e = g_enabled.load(std::memory_order_relaxed);
  if (e < 0) {
    const char* env = std::getenv("FTUNE_PACKED_MATMUL");
    int expected = -1;
    g_enabled.compare_exchange_strong(expected, env && std::string(env) == "0" ? 0 : 1);
    e = g_enabled.load();
  }
  return e == 1;
}

void set_packed_matmul_enabled(bool enabled) {
  g_enabled.store(enabled ? 1 : 0);
}

MatmulCacheStats matmul_cache_stats() {
  return {g_created.load(), g_reused.load()};
}

#ifdef FTUNE_ONEDNN_MATMUL
namespace {

// The functions of dnnl.h used here, from the loaded library.
struct Api {
#define FTUNE_DNNL_FN(name) decltype(&::name) name = nullptr;
  FTUNE_DNNL_FN(dnnl_engine_create)
  FTUNE_DNNL_FN(dnnl_stream_create)
  FTUNE_DNNL_FN(dnnl_stream_destroy)
  FTUNE_DNNL_FN(dnnl_memory_desc_init_by_strides)
  FTUNE_DNNL_FN(dnnl_memory_desc_init_by_tag)
  FTUNE_DNNL_FN(dnnl_memory_desc_get_size)
  FTUNE_DNNL_FN(dnnl_memory_desc_equal)
  FTUNE_DNNL_FN(dnnl_matmul_desc_init)
  FTUNE_DNNL_FN(dnnl_primitive_desc_create)
  FTUNE_DNNL_FN(dnnl_primitive_desc_destroy)
  FTUNE_DNNL_FN(dnnl_primitive_desc_query)
  FTUNE_DNNL_FN(dnnl_primitive_desc_query_md)
  FTUNE_DNNL_FN(dnnl_reorder_primitive_desc_create)
  FTUNE_DNNL_FN(dnnl_primitive_create)
  FTUNE_DNNL_FN(dnnl_primitive_destroy)
  FTUNE_DNNL_FN(dnnl_primitive_execute)
  FTUNE_DNNL_FN(dnnl_memory_create)
  FTUNE_DNNL_FN(dnnl_memory_destroy)
  FTUNE_DNNL_FN(dnnl_memory_set_data_handle)
  FTUNE_DNNL_FN(dnnl_version)
  FTUNE_DNNL_FN(dnnl_get_effective_cpu_isa)
#undef FTUNE_DNNL_FN
  int (*omp_get_max_threads)() = nullptr;
  void (*omp_set_num_threads)(int) = nullptr;
  dnnl_engine_t engine = nullptr;
  std::string error;  // why the packed path cannot run; empty when it can
};

const Api& api() {
  static const Api a = [] {
    Api d;
    if (!onednn_available()) {
      d.error = "oneDNN is unavailable (" + onednn_unavailable_reason() + ")";
      return d;
    }
    bool complete = true;
#define FTUNE_DNNL_LOAD(name)                                                   \
  d.name = reinterpret_cast<decltype(d.name)>(onednn_symbol(#name));            \
  complete = complete && d.name != nullptr;
    FTUNE_DNNL_LOAD(dnnl_engine_create)
    FTUNE_DNNL_LOAD(dnnl_stream_create)
    FTUNE_DNNL_LOAD(dnnl_stream_destroy)
    FTUNE_DNNL_LOAD(dnnl_memory_desc_init_by_strides)
    FTUNE_DNNL_LOAD(dnnl_memory_desc_init_by_tag)
    FTUNE_DNNL_LOAD(dnnl_memory_desc_get_size)
    FTUNE_DNNL_LOAD(dnnl_memory_desc_equal)
    FTUNE_DNNL_LOAD(dnnl_matmul_desc_init)
    FTUNE_DNNL_LOAD(dnnl_primitive_desc_create)
    FTUNE_DNNL_LOAD(dnnl_primitive_desc_destroy)
    FTUNE_DNNL_LOAD(dnnl_primitive_desc_query)
    FTUNE_DNNL_LOAD(dnnl_primitive_desc_query_md)
    FTUNE_DNNL_LOAD(dnnl_reorder_primitive_desc_create)
    FTUNE_DNNL_LOAD(dnnl_primitive_create)
    FTUNE_DNNL_LOAD(dnnl_primitive_destroy)
    FTUNE_DNNL_LOAD(dnnl_primitive_execute)
    FTUNE_DNNL_LOAD(dnnl_memory_create)
    FTUNE_DNNL_LOAD(dnnl_memory_destroy)
    FTUNE_DNNL_LOAD(dnnl_memory_set_data_handle)
    FTUNE_DNNL_LOAD(dnnl_version)
    FTUNE_DNNL_LOAD(dnnl_get_effective_cpu_isa)
#undef FTUNE_DNNL_LOAD
    d.omp_get_max_threads = reinterpret_cast<int (*)()>(onednn_symbol("omp_get_max_threads"));
    d.omp_set_num_threads = reinterpret_cast<void (*)(int)>(onednn_symbol("omp_set_num_threads"));
    if (!complete || !d.omp_get_max_threads || !d.omp_set_num_threads) {
      d.error = "the loaded oneDNN lacks part of the matmul C API";
    } else if (d.dnnl_version()->major != DNNL_VERSION_MAJOR) {
      d.error = fmt::format("the loaded oneDNN is {}.x, built against the {}.x API",
                            d.dnnl_version()->major, DNNL_VERSION_MAJOR);
    } else if (d.dnnl_engine_create(&d.engine, dnnl_cpu, 0) != dnnl_success) {
      d.error = "oneDNN could not make its CPU engine";
    }
    return d;
  }();
  return a;
}

bool cpu_has_bf16() {
  const int isa = api().dnnl_get_effective_cpu_isa();
  return isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx;
}

void check(dnnl_status_t status, const char* what) {
  if (status != dnnl_success)
    throw InternalError(fmt::format("oneDNN {} failed with status {}", what, int(status)));
}

// oneDNN runs on the calling thread only (ftune's pool has split the work): its OpenMP count is
// 1 while a primitive is made or run, the thread's own count put back after. The thread has an
// alternate signal stack first: a matmul can run oneDNN's GEMM kernels, which move the stack
// pointer into the heap (core/signal_stack.h).
class OneOmpThread {
 public:
  OneOmpThread() : before_(api().omp_get_max_threads()) {
    use_alternate_signal_stack();
    if (before_ != 1) api().omp_set_num_threads(1);
  }
  ~OneOmpThread() {
    if (before_ != 1) api().omp_set_num_threads(before_);
  }

 private:
  int before_;
};

dnnl_stream_t thread_stream() {
  struct Stream {
    dnnl_stream_t s = nullptr;
    ~Stream() {
      if (s) api().dnnl_stream_destroy(s);
    }
  };
  thread_local Stream stream;
  if (!stream.s)
    check(api().dnnl_stream_create(&stream.s, api().engine, dnnl_stream_default_flags),
          "stream creation");
  return stream.s;
}

dnnl_data_type_t data_type(MatmulPrecision p) {
  return p == MatmulPrecision::BF16 ? dnnl_bf16 : dnnl_f32;
}

// One matmul primitive: src (M, K) with row stride lds, weights (K, N) in the layout it chose,
// optional bias (1, N), dst (M, N) with row stride ldd; memory objects whose handles are set per
// call.
struct Primitive {
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_desc_t weights_md{};
  dnnl_memory_t src = nullptr, dst = nullptr, bias = nullptr;
  Primitive() = default;
  Primitive(const Primitive&) = delete;
  Primitive& operator=(const Primitive&) = delete;
  ~Primitive() {
    for (dnnl_memory_t m : {src, dst, bias})
      if (m) api().dnnl_memory_destroy(m);
    if (prim) api().dnnl_primitive_destroy(prim);
  }
};

using PrimitiveKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool, int>;
// Primitives kept per thread; past this many the cache starts over (a pass over rows of every
// length makes a few hundred at most).
constexpr size_t kMaxPrimitives = 2048;

Primitive& primitive(int64_t M, int64_t N, int64_t K, int64_t lds, int64_t ldd, bool bias,
                     MatmulPrecision p) {
  thread_local std::map<PrimitiveKey, std::unique_ptr<Primitive>> cache;
  const PrimitiveKey key{M, N, K, lds, ldd, bias, static_cast<int>(p)};
  if (auto it = cache.find(key); it != cache.end()) {
    g_reused.fetch_add(1, std::memory_order_relaxed);
    return *it->second;
  }
  if (cache.size() >= kMaxPrimitives) cache.clear();
  const Api& a = api();
  const dnnl_data_type_t dt = data_type(p);
  dnnl_memory_desc_t src_md, wei_md, bias_md, dst_md;
  const dnnl_dims_t src_dims = {M, K}, src_strides = {lds, 1};
  const dnnl_dims_t wei_dims = {K, N}, bias_dims = {1, N};
  const dnnl_dims_t dst_dims = {M, N}, dst_strides = {ldd, 1};
  check(a.dnnl_memory_desc_init_by_strides(&src_md, 2, src_dims, dt, src_strides), "src md");
  check(a.dnnl_memory_desc_init_by_tag(&wei_md, 2, wei_dims, dt, dnnl_format_tag_any),
        "weights md");
  check(a.dnnl_memory_desc_init_by_tag(&bias_md, 2, bias_dims, dnnl_f32, dnnl_ab), "bias md");
  check(a.dnnl_memory_desc_init_by_strides(&dst_md, 2, dst_dims, dnnl_f32, dst_strides),
        "dst md");
  dnnl_matmul_desc_t desc;
  check(a.dnnl_matmul_desc_init(&desc, &src_md, &wei_md, bias ? &bias_md : nullptr, &dst_md),
        "matmul desc");
  auto prim = std::make_unique<Primitive>();
  {
    const OneOmpThread one;
    dnnl_primitive_desc_t pd = nullptr;
    check(a.dnnl_primitive_desc_create(&pd, &desc, nullptr, a.engine, nullptr),
          "matmul primitive descriptor");
    prim->weights_md = *a.dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    const dnnl_status_t made = a.dnnl_primitive_create(&prim->prim, pd);
    a.dnnl_primitive_desc_destroy(pd);
    check(made, "matmul primitive creation");
  }
  check(a.dnnl_memory_create(&prim->src, &src_md, a.engine, DNNL_MEMORY_NONE), "src memory");
  check(a.dnnl_memory_create(&prim->dst, &dst_md, a.engine, DNNL_MEMORY_NONE), "dst memory");
  if (bias)
    check(a.dnnl_memory_create(&prim->bias, &bias_md, a.engine, DNNL_MEMORY_NONE),
          "bias memory");
  g_created.fetch_add(1, std::memory_order_relaxed);
  return *cache.emplace(key, std::move(prim)).first->second;
}

// A weight in one packed layout (oneDNN owns the buffer).
struct Packed {
  dnnl_memory_desc_t md{};
  dnnl_memory_t mem = nullptr;
  size_t bytes = 0;
};

// Input rows rounded to bf16 (per thread, grown as needed).
const void* to_bf16(const float* inp, int64_t ldi, int64_t M, int64_t K) {
  thread_local std::vector<bf16_t> rows;
  rows.resize(static_cast<size_t>(M * K));
  for (int64_t i = 0; i < M; ++i) {
    const float* x = inp + i * ldi;
    bf16_t* y = rows.data() + i * K;
#pragma omp simd
    for (int64_t k = 0; k < K; ++k) y[k] = float_to_bf16(x[k]);
  }
  return rows.data();
}

}  // namespace

struct PackedWeights::Impl {
  std::mutex mu;
  // Per weight address: (out, in) and its packed copies (one per layout asked for).
  std::unordered_map<const float*, std::vector<std::unique_ptr<Packed>>> packed;
  int64_t count = 0, bytes = 0;
  ~Impl() {
    for (auto& [w, list] : packed)
      for (auto& p : list) api().dnnl_memory_destroy(p->mem);
  }

  // The weight (OC, C) in `layout`, reordered on the first request.
  dnnl_memory_t get(const float* weight, int64_t OC, int64_t C, const dnnl_memory_desc_t& layout) {
    const Api& a = api();
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::unique_ptr<Packed>>& list = packed[weight];
    for (const auto& p : list)
      if (a.dnnl_memory_desc_equal(&p->md, &layout)) return p->mem;
    // weight (OC, C) row-major is W^T (K = C, N = OC) with strides (1, C).
    dnnl_memory_desc_t plain_md;
    const dnnl_dims_t dims = {C, OC}, strides = {1, C};
    check(a.dnnl_memory_desc_init_by_strides(&plain_md, 2, dims, dnnl_f32, strides), "plain md");
    auto p = std::make_unique<Packed>();
    p->md = layout;
    p->bytes = a.dnnl_memory_desc_get_size(&layout);
    check(a.dnnl_memory_create(&p->mem, &layout, a.engine, DNNL_MEMORY_ALLOCATE), "packed memory");
    dnnl_memory_t plain = nullptr;
    check(a.dnnl_memory_create(&plain, &plain_md, a.engine, const_cast<float*>(weight)),
          "plain memory");
    const OneOmpThread one;
    dnnl_primitive_desc_t rpd = nullptr;
    dnnl_primitive_t reorder = nullptr;
    dnnl_status_t st = a.dnnl_reorder_primitive_desc_create(&rpd, &plain_md, a.engine, &layout,
                                                            a.engine, nullptr);
    if (st == dnnl_success) st = a.dnnl_primitive_create(&reorder, rpd);
    if (st == dnnl_success) {
      const dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, p->mem}};
      st = a.dnnl_primitive_execute(reorder, thread_stream(), 2, args);
    }
    if (reorder) a.dnnl_primitive_destroy(reorder);
    if (rpd) a.dnnl_primitive_desc_destroy(rpd);
    a.dnnl_memory_destroy(plain);
    if (st != dnnl_success) {
      a.dnnl_memory_destroy(p->mem);
      check(st, "weight reorder");
    }
    ++count;
    bytes += static_cast<int64_t>(p->bytes);
    list.push_back(std::move(p));
    return list.back()->mem;
  }
};

bool packed_matmul_supports(MatmulPrecision precision) {
  return packed_matmul_unavailable_reason(precision).empty();
}

std::string packed_matmul_unavailable_reason(MatmulPrecision precision) {
  if (!packed_matmul_enabled()) return "turned off (FTUNE_PACKED_MATMUL=0)";
  if (gemm_library() != GemmLibrary::OneDnn)
    return "the CPU GEMM library is OpenBLAS (FTUNE_CPU_GEMM), not oneDNN";
  if (!api().error.empty()) return api().error;
  if (precision == MatmulPrecision::BF16 && !cpu_has_bf16())
    return "this CPU has no native bf16 (AVX512-BF16 or AMX)";
  return "";
}

std::string matmul_description() {
  if (!packed_matmul_supports(MatmulPrecision::F32))
    return "plain GEMM (no packed weights: " +
           packed_matmul_unavailable_reason(MatmulPrecision::F32) + ")";
  const bool amx = api().dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core_amx;
  return fmt::format(
      "oneDNN matmul primitive, weights packed once, bias fused; bf16 scoring {}",
      cpu_has_bf16() ? (amx ? "available (AMX)" : "available (AVX512-BF16, no AMX)")
                     : "unavailable (no native bf16)");
}

PackedWeights::PackedWeights(MatmulPrecision precision)
    : precision_(precision), impl_(std::make_unique<Impl>()) {}
PackedWeights::~PackedWeights() = default;

int64_t PackedWeights::packed_count() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->count;
}
int64_t PackedWeights::packed_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->bytes;
}

bool PackedWeights::linear(float* out, int64_t ldo, const float* inp, int64_t ldi,
                           const float* weight, const float* bias, int64_t N, int64_t C,
                           int64_t OC) {
  if (N == 0 || OC == 0) return true;
  if (C == 0 || !packed_matmul_supports(precision_)) return false;
  const profile::OpScope scope("packed_matmul", Device::cpu());
  const MatmulPrecision p = precision_;
  // Blocks of at most kMatmulRows rows, their count a multiple of the thread count.
  const int64_t threads = compute_threads();
  const int64_t per_round = threads * kMatmulRows;
  const int64_t blocks = std::max<int64_t>(1, threads * ((N + per_round - 1) / per_round));
  const int64_t rows = std::min<int64_t>(N, ((N + blocks - 1) / blocks + 15) / 16 * 16);
  const int64_t tasks = (N + rows - 1) / rows;
  const auto run = [&](int64_t t) {
    const int64_t m0 = t * rows, m = std::min(rows, N - m0);
    const void* src = inp + m0 * ldi;
    int64_t lds = ldi;
    if (p == MatmulPrecision::BF16) {
      src = to_bf16(inp + m0 * ldi, ldi, m, C);
      lds = C;
    }
    Primitive& prim = primitive(m, OC, C, lds, ldo, bias != nullptr, p);
    dnnl_memory_t w = impl_->get(weight, OC, C, prim.weights_md);
    const Api& a = api();
    a.dnnl_memory_set_data_handle(prim.src, const_cast<void*>(src));
    a.dnnl_memory_set_data_handle(prim.dst, out + m0 * ldo);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, prim.src},
                               {DNNL_ARG_WEIGHTS, w},
                               {DNNL_ARG_DST, prim.dst},
                               {DNNL_ARG_BIAS, prim.bias}};
    if (bias) a.dnnl_memory_set_data_handle(prim.bias, const_cast<float*>(bias));
    const OneOmpThread one;
    check(a.dnnl_primitive_execute(prim.prim, thread_stream(), bias ? 4 : 3, args),
          "matmul execution");
  };
  if (tasks == 1 || in_parallel_region()) {
    for (int64_t t = 0; t < tasks; ++t) run(t);
  } else {
    compute_pool().parallel_tasks(tasks, run);
  }
  return true;
}

#else  // built without oneDNN's header: the plain GEMM everywhere

struct PackedWeights::Impl {};

bool packed_matmul_supports(MatmulPrecision) {
  return false;
}
std::string packed_matmul_unavailable_reason(MatmulPrecision) {
  if (!packed_matmul_enabled()) return "turned off (FTUNE_PACKED_MATMUL=0)";
  return "built without oneDNN's header (Debian libdnnl-dev)";
}
std::string matmul_description() {
  return "plain GEMM (no packed weights: " +
         packed_matmul_unavailable_reason(MatmulPrecision::F32) + ")";
}
PackedWeights::PackedWeights(MatmulPrecision precision)
    : precision_(precision), impl_(std::make_unique<Impl>()) {}
PackedWeights::~PackedWeights() = default;
int64_t PackedWeights::packed_count() const {
  return 0;
}
int64_t PackedWeights::packed_bytes() const {
  return 0;
}
bool PackedWeights::linear(float*, int64_t, const float*, int64_t, const float*, const float*,
                           int64_t, int64_t, int64_t) {
  return false;
}

#endif

}  // namespace ftune::cpu
