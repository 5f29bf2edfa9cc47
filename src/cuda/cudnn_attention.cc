// cuDNN fused flash attention through cudnn_frontend's graph API (see cudnn_attention.h): graph
// construction for ftune's fused QKV layout, a per-shape cache of built graphs and workspace
// sizes and one cuDNN handle per device bound to the compute stream. Host code only, compiled once
// by the host compiler (the frontend's headers are large: nvcc would parse them once per GPU
// architecture); the kernels that turn ftune's key mask, packed rows and dropout key into cuDNN's
// inputs are in cudnn_attention_kernels.cu.
#ifdef FTUNE_WITH_CUDA  // the library's .cc files are compiled in CPU-only builds too

#include "cuda/cudnn_attention.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstring>  // before cudnn_frontend.h: its shim (1.32) uses std::strlen without including it
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/cuda_device.h"
#include "cuda/sdpa_plan_cache.h"
#include "cuda/streams.cuh"

#ifdef FTUNE_WITH_CUDNN_SDPA
#include <cudnn.h>
#include <cudnn_frontend.h>
#endif

namespace ftune::cuda {

std::string sdpa_shape_problem(const SdpaShape& s) {
  if (s.B < 1 || s.T < 1 || s.H < 1 || s.D < 1)
    return "B, T, H and D must be positive (got B " + std::to_string(s.B) + ", T " +
           std::to_string(s.T) + ", H " + std::to_string(s.H) + ", D " + std::to_string(s.D) + ")";
  if (s.D % 8 != 0 || s.D > 128)
    return "head dimension " + std::to_string(s.D) +
           " is not supported (cuDNN fused attention: a multiple of 8, at most 128)";
  if ((s.H * s.D) % 8 != 0)
    return "hidden size " + std::to_string(s.H * s.D) +
           " is not a multiple of 8 (q, k, v views of the fused qkv buffer must be 16-byte "
           "aligned)";
  if (!(s.dropout >= 0 && s.dropout < 1))
    return "dropout " + std::to_string(s.dropout) + " is not in [0, 1)";
  if (s.B * s.T > INT32_MAX || s.T > INT32_MAX) return "B * T exceeds 2^31";
  return "";
}

#ifdef FTUNE_WITH_CUDNN_SDPA

namespace {

namespace fe = cudnn_frontend;

// Tensor uids of the variant packs.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kSeqQ,
  kSeqKV,
  kSeed,
  kOffset,
  kDO,
  kDQ,
  kDK,
  kDV,
  kRaggedQkv,  // ragged offsets (packed rows): q, k, v, dq, dk, dv
  kRaggedOut   // o, do
};

void check_cudnn(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw DeviceError(std::string("cuDNN: ") + call + " failed: " + cudnnGetErrorString(status));
}

// One handle per device, created on first use, bound to that device's compute stream.
constexpr int kMaxDevices = 64;
struct DeviceHandle {
  std::once_flag once;
  cudnnHandle_t handle = nullptr;
};
std::array<DeviceHandle, kMaxDevices> g_handles;

int current_device() {
  int device = 0;
  FTUNE_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices)
    throw DeviceError("cuda:" + std::to_string(device) + ": more devices than ftune supports");
  return device;
}

cudnnHandle_t handle_for(int device) {
  DeviceHandle& h = g_handles[static_cast<size_t>(device)];
  std::call_once(h.once, [&h] {
    check_cudnn(cudnnCreate(&h.handle), "cudnnCreate");
    check_cudnn(cudnnSetStream(h.handle, compute_stream()), "cudnnSetStream");
  });
  return h.handle;
}

fe::DataType_t io_type(SdpaDtype d) {
  return d == SdpaDtype::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

// Graph-building helpers: the (B, H, T, D) views of ftune's row-major buffers.
struct Views {
  int64_t B, T, H, D, C;
  // q / k / v inside (B*T, 3C): row stride 3C, head stride D.
  std::vector<int64_t> qkv_stride() const { return {T * 3 * C, D, 3 * C, 1}; }
  // out / dout inside (B*T, C).
  std::vector<int64_t> out_stride() const { return {T * C, D, C, 1}; }
  std::vector<int64_t> dims() const { return {B, H, T, D}; }
};

std::shared_ptr<fe::graph::Tensor_attributes> add_tensor(fe::graph::Graph& g, const char* name,
                                                         int64_t uid, std::vector<int64_t> dim,
                                                         std::vector<int64_t> stride) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(std::move(dim))
                      .set_stride(std::move(stride)));
}

std::shared_ptr<fe::graph::Tensor_attributes> add_int_tensor(fe::graph::Graph& g, const char* name,
                                                             int64_t uid, int64_t n,
                                                             fe::DataType_t type) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({n, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_data_type(type));
}

// The (B + 1) i64 ragged-offset tensors of a packed call (null when padded).
struct Ragged {
  std::shared_ptr<fe::graph::Tensor_attributes> qkv, out;
};
Ragged ragged_tensors(fe::graph::Graph& g, const SdpaShape& s) {
  if (!s.ragged) return {};
  return {add_int_tensor(g, "ragged_qkv", kRaggedQkv, s.B + 1, fe::DataType_t::INT64),
          add_int_tensor(g, "ragged_out", kRaggedOut, s.B + 1, fe::DataType_t::INT64)};
}
void set_ragged(const std::shared_ptr<fe::graph::Tensor_attributes>& t,
                const std::shared_ptr<fe::graph::Tensor_attributes>& offsets) {
  if (offsets) t->set_ragged_offset(offsets);
}

const char* fe_code_name(fe::error_code_t code) {
  switch (code) {
    case fe::error_code_t::OK: return "OK";
    case fe::error_code_t::ATTRIBUTE_NOT_SET: return "ATTRIBUTE_NOT_SET";
    case fe::error_code_t::SHAPE_DEDUCTION_FAILED: return "SHAPE_DEDUCTION_FAILED";
    case fe::error_code_t::INVALID_TENSOR_NAME: return "INVALID_TENSOR_NAME";
    case fe::error_code_t::INVALID_VARIANT_PACK: return "INVALID_VARIANT_PACK";
    case fe::error_code_t::GRAPH_NOT_SUPPORTED: return "GRAPH_NOT_SUPPORTED";
    case fe::error_code_t::GRAPH_EXECUTION_PLAN_CREATION_FAILED:
      return "GRAPH_EXECUTION_PLAN_CREATION_FAILED";
    case fe::error_code_t::GRAPH_EXECUTION_FAILED: return "GRAPH_EXECUTION_FAILED";
    case fe::error_code_t::HEURISTIC_QUERY_FAILED: return "HEURISTIC_QUERY_FAILED";
    case fe::error_code_t::UNSUPPORTED_GRAPH_FORMAT: return "UNSUPPORTED_GRAPH_FORMAT";
    case fe::error_code_t::CUDA_API_FAILED: return "CUDA_API_FAILED";
    case fe::error_code_t::CUDNN_BACKEND_API_FAILED: return "CUDNN_BACKEND_API_FAILED";
    case fe::error_code_t::INVALID_CUDA_DEVICE: return "INVALID_CUDA_DEVICE";
    case fe::error_code_t::HANDLE_ERROR: return "HANDLE_ERROR";
    case fe::error_code_t::INVALID_VALUE: return "INVALID_VALUE";
    default: break;
  }
  return "UNKNOWN_ERROR_CODE";
}

// A failed build step: SdpaNotSupported, OutOfMemoryError or DeviceError by what cuDNN answered
// (cuda/sdpa_plan_cache.h); only the first is remembered as a refusal of the shape.
void check_build(fe::error_t e, const std::string& what) {  // get_message() is not const
  if (e.is_bad()) throw_sdpa_build_failure(what, fe_code_name(e.get_code()), e.get_message());
}

// A failed execution is always an error (the plans were built for this shape).
void check_execute(fe::error_t e, const std::string& what) {
  if (e.is_bad())
    throw DeviceError("cuDNN attention: " + what + ": " + fe_code_name(e.get_code()) + ": " +
                      e.get_message());
}

std::shared_ptr<fe::graph::Graph> new_graph(const SdpaShape& s) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(io_type(s.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// What forward and backward attributes share: the per-sequence length mask (seq_lens, 2B) and,
// with dropout, its seed and offset tensors.
template <typename Attributes>
void set_lengths_and_dropout(fe::graph::Graph& g, const SdpaShape& s, Attributes& opts) {
  opts.set_padding_mask(true)
      .set_seq_len_q(add_int_tensor(g, "seq_q", kSeqQ, s.B, fe::DataType_t::INT32))
      .set_seq_len_kv(add_int_tensor(g, "seq_kv", kSeqKV, s.B, fe::DataType_t::INT32));
  if (s.dropout > 0)
    opts.set_dropout(s.dropout, add_int_tensor(g, "seed", kSeed, 1, fe::DataType_t::INT64),
                     add_int_tensor(g, "offset", kOffset, 1, fe::DataType_t::INT64));
}

std::shared_ptr<fe::graph::Graph> forward_graph(const SdpaShape& s, float scale) {
  const Views v{s.B, s.T, s.H, s.D, s.H * s.D};
  auto g = new_graph(s);
  auto Q = add_tensor(*g, "Q", kQ, v.dims(), v.qkv_stride());
  auto K = add_tensor(*g, "K", kK, v.dims(), v.qkv_stride());
  auto V = add_tensor(*g, "V", kV, v.dims(), v.qkv_stride());
  const Ragged r = ragged_tensors(*g, s);
  for (const auto& t : {Q, K, V}) set_ragged(t, r.qkv);
  auto opts = fe::graph::SDPA_attributes()
                  .set_name("ftune_sdpa")
                  .set_generate_stats(true)
                  .set_attn_scale(scale);
  set_lengths_and_dropout(*g, s, opts);
  auto [O, Stats] = g->sdpa(Q, K, V, opts);
  O->set_output(true).set_uid(kO).set_dim(v.dims()).set_stride(v.out_stride());
  set_ragged(O, r.out);
  Stats->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({s.B, s.H, s.T, 1})
      .set_stride({s.H * s.T, s.T, 1, 1});
  return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const SdpaShape& s, float scale,
                                                 bool deterministic) {
  const Views v{s.B, s.T, s.H, s.D, s.H * s.D};
  auto g = new_graph(s);
  auto Q = add_tensor(*g, "Q", kQ, v.dims(), v.qkv_stride());
  auto K = add_tensor(*g, "K", kK, v.dims(), v.qkv_stride());
  auto V = add_tensor(*g, "V", kV, v.dims(), v.qkv_stride());
  auto O = add_tensor(*g, "O", kO, v.dims(), v.out_stride());
  auto dO = add_tensor(*g, "dO", kDO, v.dims(), v.out_stride());
  const Ragged r = ragged_tensors(*g, s);
  for (const auto& t : {Q, K, V}) set_ragged(t, r.qkv);
  for (const auto& t : {O, dO}) set_ragged(t, r.out);
  auto Stats = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("Stats")
                             .set_uid(kStats)
                             .set_dim({s.B, s.H, s.T, 1})
                             .set_stride({s.H * s.T, s.T, 1, 1})
                             .set_data_type(fe::DataType_t::FLOAT));
  auto opts = fe::graph::SDPA_backward_attributes()
                  .set_name("ftune_sdpa_backward")
                  .set_attn_scale(scale)
                  .set_deterministic_algorithm(deterministic);
  set_lengths_and_dropout(*g, s, opts);
  auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, Stats, opts);
  dQ->set_output(true).set_uid(kDQ).set_dim(v.dims()).set_stride(v.qkv_stride());
  dK->set_output(true).set_uid(kDK).set_dim(v.dims()).set_stride(v.qkv_stride());
  dV->set_output(true).set_uid(kDV).set_dim(v.dims()).set_stride(v.qkv_stride());
  for (const auto& t : {dQ, dK, dV}) set_ragged(t, r.qkv);
  return g;
}

struct Built {
  std::shared_ptr<fe::graph::Graph> forward, backward;
};

SdpaPlanCache g_cache;

// The backward graph, built with cuDNN's deterministic algorithm where it has one for the shape;
// a "not supported" answer for it falls back to the default algorithm (recorded in `plans`, logged
// and counted by the cache); any other failure propagates.
std::shared_ptr<fe::graph::Graph> build_backward(const SdpaShape& s, float scale,
                                                 cudnnHandle_t handle, SdpaPlans& plans) {
  auto g = backward_graph(s, scale, true);
  try {
    check_build(g->build(handle, {fe::HeurMode_t::A}), "building the deterministic backward graph");
    return g;
  } catch (const SdpaNotSupported& e) {
    plans.deterministic = false;
    plans.nondeterministic_why = e.what();
  }
  g = backward_graph(s, scale, false);
  check_build(g->build(handle, {fe::HeurMode_t::A}), "building the backward graph");
  return g;
}

// The built graphs of (current device, shape), building them on first use (softmax scale
// 1/sqrt(D), as ops/attention.h). Throws SdpaNotSupported (remembered) when cuDNN has no engine
// for the shape; OutOfMemoryError or DeviceError (not remembered) for any other failure.
std::shared_ptr<const SdpaPlans> graphs_for(const SdpaShape& s) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  const std::string problem = sdpa_shape_problem(s);
  if (!problem.empty()) throw SdpaNotSupported("cuDNN attention: " + problem);
  const int device = current_device();
  const SdpaPlanKey key{device, s.B, s.T, s.H, s.D, static_cast<int>(s.dtype), s.dropout,
                        s.ragged};
  return g_cache.get(key, [&] {
    const cudnnHandle_t handle = handle_for(device);
    SdpaPlans plans;
    auto b = std::make_shared<Built>();
    b->forward = forward_graph(s, scale);
    check_build(b->forward->build(handle, {fe::HeurMode_t::A}), "building the forward graph");
    check_build(b->forward->get_workspace_size(plans.forward_ws), "forward workspace size");
    // ftune's runs are bit-reproducible; take cuDNN's deterministic backward where it has one.
    b->backward = build_backward(s, scale, handle, plans);
    check_build(b->backward->get_workspace_size(plans.backward_ws), "backward workspace size");
    plans.graphs = b;
    return plans;
  });
}

const Built& built(const SdpaPlans& p) {
  return *static_cast<const Built*>(p.graphs.get());
}

void check_workspace(const SdpaPlans& b, size_t have, const char* pass) {
  const int64_t need = std::max(b.forward_ws, b.backward_ws);
  if (static_cast<int64_t>(have) < need)
    throw ShapeError(std::string("cuDNN attention ") + pass + ": workspace of " +
                     std::to_string(have) + " bytes, the plan must give " + std::to_string(need) +
                     " (cudnn_sdpa_workspace_bytes)");
}

void execute(const fe::graph::Graph& g, std::unordered_map<int64_t, void*>& pack, void* workspace,
             const char* pass) {
  const cudnnHandle_t handle = handle_for(current_device());
  check_cudnn(cudnnSetStream(handle, compute_stream()), "cudnnSetStream");
  check_execute(g.execute(handle, pack, workspace), pass);
}

// Element `elements` of a buffer of 2-byte elements (the q, k, v views of a (B*T, 3C) buffer).
void* element_ptr(const void* base, int64_t elements) {
  return const_cast<uint16_t*>(static_cast<const uint16_t*>(base) + elements);
}

// The ragged offsets in a variant pack (packed rows).
void add_ragged(std::unordered_map<int64_t, void*>& pack, const SdpaShape& s,
                const int64_t* ragged) {
  if (!s.ragged) return;
  if (ragged == nullptr) throw InternalError("cuDNN attention: a ragged call without its offsets");
  pack[kRaggedQkv] = const_cast<int64_t*>(ragged);
  pack[kRaggedOut] = const_cast<int64_t*>(ragged + s.B + 1);
}

}  // namespace


bool cudnn_sdpa_supported(const SdpaShape& shape, std::string* why) {
  // No device is an answer, not an error: nothing can run (the build is asked, not a GPU).
  if (device_count() == 0) {
    if (why) *why = "no CUDA device (cuDNN attention runs on a GPU)";
    return false;
  }
  try {
    graphs_for(shape);
    return true;
  } catch (const SdpaNotSupported& e) {  // anything else is not a refusal: it propagates
    if (why) *why = e.what();
    return false;
  }
}

size_t cudnn_sdpa_workspace_bytes(const SdpaShape& shape) {
  const auto b = graphs_for(shape);
  return static_cast<size_t>(std::max(b->forward_ws, b->backward_ws));
}

void cudnn_sdpa_forward(void* out, float* stats, const void* qkv, const int32_t* seq_lens,
                        const int64_t* ragged, const int64_t* rng, const SdpaShape& s,
                        void* workspace, size_t workspace_bytes) {
  const auto b = graphs_for(s);
  check_workspace(*b, workspace_bytes, "forward");
  const int64_t C = s.H * s.D;
  std::unordered_map<int64_t, void*> pack = {{kQ, element_ptr(qkv, 0)},
                                             {kK, element_ptr(qkv, C)},
                                             {kV, element_ptr(qkv, 2 * C)},
                                             {kO, out},
                                             {kStats, stats},
                                             {kSeqQ, const_cast<int32_t*>(seq_lens)},
                                             {kSeqKV, const_cast<int32_t*>(seq_lens + s.B)}};
  if (s.dropout > 0) {
    pack[kSeed] = const_cast<int64_t*>(rng);
    pack[kOffset] = const_cast<int64_t*>(rng + 1);
  }
  add_ragged(pack, s, ragged);
  execute(*built(*b).forward, pack, workspace, "forward");
}

void cudnn_sdpa_backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                         const float* stats, const int32_t* seq_lens, const int64_t* ragged,
                         const int64_t* rng, const SdpaShape& s, void* workspace,
                         size_t workspace_bytes) {
  const auto b = graphs_for(s);
  check_workspace(*b, workspace_bytes, "backward");
  const int64_t C = s.H * s.D;
  // Gradients of padding keys are not written by every engine: clear dqkv first so they are 0.
  FTUNE_CUDA_CHECK(
      cudaMemsetAsync(dqkv, 0, static_cast<size_t>(s.rows() * 3 * C) * 2, compute_stream()));
  std::unordered_map<int64_t, void*> pack = {{kQ, element_ptr(qkv, 0)},
                                             {kK, element_ptr(qkv, C)},
                                             {kV, element_ptr(qkv, 2 * C)},
                                             {kO, const_cast<void*>(out)},
                                             {kDO, const_cast<void*>(dout)},
                                             {kStats, const_cast<float*>(stats)},
                                             {kSeqQ, const_cast<int32_t*>(seq_lens)},
                                             {kSeqKV, const_cast<int32_t*>(seq_lens + s.B)},
                                             {kDQ, element_ptr(dqkv, 0)},
                                             {kDK, element_ptr(dqkv, C)},
                                             {kDV, element_ptr(dqkv, 2 * C)}};
  if (s.dropout > 0) {
    pack[kSeed] = const_cast<int64_t*>(rng);
    pack[kOffset] = const_cast<int64_t*>(rng + 1);
  }
  add_ragged(pack, s, ragged);
  execute(*built(*b).backward, pack, workspace, "backward");
}

#else  // !FTUNE_WITH_CUDNN_SDPA

namespace {
[[noreturn]] void not_built() {
  throw DeviceError(
      "not built with cuDNN attention (CMake found no cudnn_frontend.h / cuDNN; set "
      "FTUNE_CUDNN_FRONTEND_DIR or run tools/install_deps.sh)");
}
}  // namespace


bool cudnn_sdpa_supported(const SdpaShape&, std::string* why) {
  if (why) *why = "not built with cuDNN attention (CMake found no cudnn_frontend.h / cuDNN)";
  return false;
}
size_t cudnn_sdpa_workspace_bytes(const SdpaShape&) {
  not_built();
}
void cudnn_sdpa_forward(void*, float*, const void*, const int32_t*, const int64_t*, const int64_t*,
                        const SdpaShape&, void*, size_t) {
  not_built();
}
void cudnn_sdpa_backward(void*, const void*, const void*, const void*, const float*, const int32_t*,
                         const int64_t*, const int64_t*, const SdpaShape&, void*, size_t) {
  not_built();
}

#endif  // FTUNE_WITH_CUDNN_SDPA

}  // namespace ftune::cuda

#endif  // FTUNE_WITH_CUDA
