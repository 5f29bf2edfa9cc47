// The disentangled attention op (ops/disentangled_attention.h): against transformers' own
// DebertaV2 DisentangledSelfAttention (tests/fixtures/deberta/disentangled_cases.safetensors,
// written by tools/make_deberta_op_fixtures.py: shared and separate position projections, c2p and
// p2c alone and together, log buckets narrower than the sequence, clamped plain distances, padded
// rows), the relative-index tables of HF's build_relative_position, a plain double-precision
// reference with dropout (the masks keyed as ops/attention.h's), and finite differences of every
// input. Runs on every device present.
#include "ops/disentangled_attention.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "core/gpu_paths.h"
#include "core/thread_pool.h"
#include "ops/cast.h"
#include "io/safetensors.h"
#include "op_test_util.h"

namespace ftune::test {
namespace {

class DisentangledAttentionTest : public OpTest {};

DisentangledSpec spec_of(const nlohmann::json& cs) {
  DisentangledSpec s;
  s.heads = cs.at("heads");
  s.head_dim = cs.at("head_dim");
  s.c2p = cs.at("c2p");
  s.p2c = cs.at("p2c");
  s.position_buckets = cs.at("position_buckets");
  s.max_relative_positions = cs.at("max_relative_positions");
  return s;
}

// Inputs and outputs of one call, on a device.
struct OpRun {
  DisentangledCall call;
  DeviceTensor q, k, v, pk, pq, dout, mask, saved, ws;
  DeviceTensor out, dq, dk, dv, dpk, dpq;
  OpRun(const DisentangledSpec& s, int64_t B, int64_t T, Device dev, const std::vector<float>& qv,
      const std::vector<float>& kv, const std::vector<float>& vv, const std::vector<float>& pkv,
      const std::vector<float>& pqv, const std::vector<float>& doutv,
      const std::vector<int32_t>& maskv, float p = 0.0f)
      : q(device_f32(qv, {B * T, s.heads * s.head_dim}, dev)),
        k(device_f32(kv, {B * T, s.heads * s.head_dim}, dev)),
        v(device_f32(vv, {B * T, s.heads * s.head_dim}, dev)),
        pk(device_f32(pkv, {2 * s.span(), s.heads * s.head_dim}, dev)),
        pq(device_f32(pqv, {2 * s.span(), s.heads * s.head_dim}, dev)),
        dout(device_f32(doutv, {B * T, s.heads * s.head_dim}, dev)),
        mask(device_i32(maskv, {B * T}, dev)),
        saved(poisoned({disentangled_attention_buffers(s, dev, B, T, true).saved}, dev)),
        ws(zeros({disentangled_attention_buffers(s, dev, B, T, true).workspace}, dev)),
        out(poisoned({B * T, s.heads * s.head_dim}, dev)),
        dq(poisoned({B * T, s.heads * s.head_dim}, dev)),
        dk(poisoned({B * T, s.heads * s.head_dim}, dev)),
        dv(poisoned({B * T, s.heads * s.head_dim}, dev)),
        dpk(poisoned({2 * s.span(), s.heads * s.head_dim}, dev)),
        dpq(poisoned({2 * s.span(), s.heads * s.head_dim}, dev)) {
    call.spec = s;
    call.batch = B;
    call.seq = T;
    call.key_mask = mask.view();
    call.dropout_p = p;
    call.rng = RngKey{77, 5, 3};
    call.workspace = ws.view();
  }
  TensorView opt(const DeviceTensor& t, bool on) const { return on ? t.view() : TensorView(); }
  void forward() {
    disentangled_attention_forward(call, out.view(), saved.view(), q.view(), k.view(), v.view(),
                                   opt(pk, call.spec.c2p), opt(pq, call.spec.p2c));
  }
  void backward() {
    disentangled_attention_backward(call, dq.view(), dk.view(), dv.view(), opt(dpk, call.spec.c2p),
                                    opt(dpq, call.spec.p2c), dout.view(), q.view(), k.view(),
                                    v.view(), opt(pk, call.spec.c2p), opt(pq, call.spec.p2c),
                                    saved.view());
  }
};

std::vector<float> host_or_empty(const io::SafetensorsFile& f, const std::string& name,
                                 int64_t n) {
  if (f.find(name) != nullptr) return to_vector(f.read(name).view());
  return std::vector<float>(n, 0.0f);
}

TEST_P(DisentangledAttentionTest, MatchesTransformersDisentangledSelfAttention) {
  const auto file =
      io::SafetensorsFile::open(fixtures_dir() + "/deberta/disentangled_cases.safetensors");
  const auto cases = nlohmann::json::parse(file.metadata().at("cases"));
  ASSERT_EQ(cases.size(), 4u);
  for (const auto& cs : cases) {
    const std::string name = cs.at("name");
    SCOPED_TRACE(name);
    const DisentangledSpec s = spec_of(cs);
    const int64_t B = cs.at("batch"), T = cs.at("seq"), C = s.heads * s.head_dim;
    const int64_t R = 2 * s.span() * C;
    auto get = [&](const std::string& t) { return to_vector(file.read(name + "." + t).view()); };
    auto maybe = [&](const std::string& t) { return host_or_empty(file, name + "." + t, R); };
    const HostTensor mask_h = file.read(name + ".key_mask");
    const auto* mp = mask_h.view().data_as<int32_t>();
    OpRun run(s, B, T, device(), get("q"), get("k"), get("v"), maybe("pos_key"), maybe("pos_query"),
            get("dout"), std::vector<int32_t>(mp, mp + B * T));
    run.forward();
    run.backward();
    auto want = [&](const std::string& t) { return file.read(name + "." + t); };
    EXPECT_LE(max_rel_error(run.out.view(), want("out").view()), 2e-5) << "out";
    EXPECT_LE(max_rel_error(run.dq.view(), want("dq").view()), 5e-5) << "dq";
    EXPECT_LE(max_rel_error(run.dk.view(), want("dk").view()), 5e-5) << "dk";
    EXPECT_LE(max_rel_error(run.dv.view(), want("dv").view()), 5e-5) << "dv";
    if (s.c2p) EXPECT_LE(max_rel_error(run.dpk.view(), want("dpos_key").view()), 5e-5) << "dpk";
    if (s.p2c) EXPECT_LE(max_rel_error(run.dpq.view(), want("dpos_query").view()), 5e-5) << "dpq";
  }
}

TEST(DisentangledRelativeIndex, MatchesBuildRelativePosition) {
  const auto file =
      io::SafetensorsFile::open(fixtures_dir() + "/deberta/disentangled_cases.safetensors");
  const auto tables = nlohmann::json::parse(file.metadata().at("indices"));
  ASSERT_EQ(tables.size(), 5u);
  for (const auto& t : tables) {
    const std::string name = t.at("name");
    DisentangledSpec s;
    s.position_buckets = t.at("position_buckets");
    s.max_relative_positions = t.at("max_relative_positions");
    const int64_t T = t.at("seq");
    const HostTensor want = file.read("index." + name);
    const int32_t* w = want.view().data_as<int32_t>();
    int wrong = 0;
    for (int64_t d = 0; d < 2 * T - 1; ++d)
      if (deberta_relative_index(s, d - (T - 1)) != w[d] && ++wrong < 5)
        ADD_FAILURE() << name << ": delta " << d - (T - 1) << " gives "
                      << deberta_relative_index(s, d - (T - 1)) << ", HF " << w[d];
    EXPECT_EQ(wrong, 0) << name;
  }
}

// A plain reference in double: scores, masked softmax, dropout with the multipliers at the
// attention op's stream indices.
std::vector<double> reference_out(const DisentangledSpec& s, int64_t B, int64_t T,
                                  const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, const std::vector<float>& pk,
                                  const std::vector<float>& pq, const std::vector<int32_t>& mask,
                                  float p, RngKey rng) {
  const int64_t H = s.heads, D = s.head_dim, C = H * D;
  const double c = 1.0 / std::sqrt(double(D) * (1 + s.c2p + s.p2c));
  std::vector<double> out(B * T * C, 0.0), row(T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < T; ++j) {
          const int64_t r = deberta_relative_index(s, i - j);
          double x = 0;
          for (int64_t d = 0; d < D; ++d) {
            const double qi = q[(b * T + i) * C + h * D + d], kj = k[(b * T + j) * C + h * D + d];
            x += qi * kj + (s.c2p ? qi * pk[r * C + h * D + d] : 0) +
                 (s.p2c ? kj * pq[r * C + h * D + d] : 0);
          }
          row[j] = c * x;
          if (mask[b * T + j]) mx = std::max(mx, row[j]);
        }
        for (int64_t j = 0; j < T; ++j) sum += (row[j] = mask[b * T + j] ? std::exp(row[j] - mx) : 0);
        for (int64_t j = 0; j < T; ++j) {
          double pij = mask[b * T + i] ? row[j] / sum : 1.0 / T;
          if (p > 0) {
            const uint64_t e = ((uint64_t(b) * H + h) * T + i) * T + j;
            pij *= philox_uniform_at(rng, e) >= p ? 1.0 / (1.0 - p) : 0.0;
          }
          for (int64_t d = 0; d < D; ++d)
            out[(b * T + i) * C + h * D + d] += pij * v[(b * T + j) * C + h * D + d];
        }
      }
  return out;
}

DisentangledSpec small_spec(bool c2p, bool p2c) {
  DisentangledSpec s;
  s.heads = 2;
  s.head_dim = 3;
  s.c2p = c2p;
  s.p2c = p2c;
  s.position_buckets = 4;
  s.max_relative_positions = 12;
  return s;
}

TEST_P(DisentangledAttentionTest, DropoutAndGradientsMatchReferenceAndFiniteDifferences) {
  for (const auto& [c2p, p2c] : {std::pair{true, true}, {true, false}, {false, true}}) {
    SCOPED_TRACE(::testing::Message() << "c2p " << c2p << " p2c " << p2c);
    const DisentangledSpec s = small_spec(c2p, p2c);
    const int64_t B = 2, T = 9, C = s.heads * s.head_dim, R = 2 * s.span() * C;
    const float p = 0.25f;
    std::vector<float> q = random_values(B * T * C, rng), k = random_values(B * T * C, rng),
                       v = random_values(B * T * C, rng), pk = random_values(R, rng),
                       pq = random_values(R, rng), r = random_values(B * T * C, rng);
    std::vector<int32_t> mask(B * T, 1);
    for (int64_t t = 6; t < T; ++t) mask[T + t] = 0;  // row 1 has 6 real tokens
    auto run_out = [&]() {
      OpRun run(s, B, T, device(), q, k, v, pk, pq, r, mask, p);
      run.forward();
      return to_vector(run.out.view());
    };
    OpRun run(s, B, T, device(), q, k, v, pk, pq, r, mask, p);
    run.forward();
    run.backward();
    expect_close(to_vector(run.out.view()),
                 reference_out(s, B, T, q, k, v, pk, pq, mask, p, run.call.rng), 1e-5, "out");
    auto loss = [&]() { return weighted_sum(run_out(), r); };
    expect_gradient(loss, q.data(), q.size(), to_vector(run.dq.view()), 2e-3, "dq");
    expect_gradient(loss, k.data(), k.size(), to_vector(run.dk.view()), 2e-3, "dk");
    expect_gradient(loss, v.data(), v.size(), to_vector(run.dv.view()), 2e-3, "dv");
    if (c2p) expect_gradient(loss, pk.data(), pk.size(), to_vector(run.dpk.view()), 2e-3, "dpk");
    if (p2c) expect_gradient(loss, pq.data(), pq.size(), to_vector(run.dpq.view()), 2e-3, "dpq");
  }
}

TEST_P(DisentangledAttentionTest, RejectsAMissingPositionTensorAndASmallWorkspace) {
  const DisentangledSpec s = small_spec(true, true);
  const int64_t B = 1, T = 5, C = s.heads * s.head_dim, R = 2 * s.span() * C;
  OpRun run(s, B, T, device(), random_values(T * C, rng), random_values(T * C, rng),
          random_values(T * C, rng), random_values(R, rng), random_values(R, rng),
          random_values(T * C, rng), std::vector<int32_t>(T, 1));
  EXPECT_THROW(disentangled_attention_forward(run.call, run.out.view(), run.saved.view(),
                                              run.q.view(), run.k.view(), run.v.view(),
                                              run.pk.view(), TensorView()),
               ShapeError);
  DisentangledCall small = run.call;
  small.workspace = run.ws.view().flat_range(0, 3);
  EXPECT_THROW(disentangled_attention_forward(small, run.out.view(), run.saved.view(),
                                              run.q.view(), run.k.view(), run.v.view(),
                                              run.pk.view(), run.pq.view()),
               ShapeError);
}

DeviceTensor cast_to(const DeviceTensor& t, DType dtype) {
  DeviceTensor out(t.view().device, dtype, t.view().shape);
  cast(out.view(), t.view());
  return out;
}

// 16-bit storage: q, k, v, dout, out, dq, dk, dv of `dtype` (and 16-bit position tensors with
// fp32 gradients) give the fp32 op's results on the same 16-bit-representable values. On the CPU
// exactly: each output the fp32 result rounded once to `dtype`, the fp32 gradients of the position
// tensors the fp32 op's bits. On CUDA the tensor-core path runs (gpu_paths counts it), which rounds
// P and dS to `dtype` for their products: within kTol16 of the CPU's fp32 results (relative to each
// tensor's largest element; tests/ops/disentangled_fused16_emulation_test.cc derives the bound
// for the same arithmetic on the host), and its backward gives the same bits twice. A workspace
// planned for fp32 is refused. q, k and the position tensors are drawn in [-magnitude,
// magnitude], v and dout in [-1, 1]. Returns the largest |q . pk| of a head (the unscaled c2p
// product).
// The CUDA 16-bit path's tolerances (of expect_close: relative to the tensor's largest element;
// the host emulation of the same arithmetic stays within 4.6e-3 (bf16) and 6e-4 (f16) of it).
constexpr double kTol16Bf16 = 2e-2, kTol16F16 = 5e-3;

float expect_16bit_storage_gives_fp32_results(Device dev, std::mt19937_64& rng, DType dtype,
                                              float magnitude,
                                              const DisentangledSpec& s = small_spec(true, true),
                                              int64_t T = 9) {
  const int64_t B = 2, C = s.heads * s.head_dim, R = 2 * s.span() * C;
  const auto round16 = [&](float e) {
    return dtype == DType::BF16 ? bf16_to_float(float_to_bf16(e)) : f16_to_float(float_to_f16(e));
  };
  auto rounded = [&](int64_t n, float m) {
    std::vector<float> x = random_values(n, rng, -m, m);
    for (float& e : x) e = round16(e);
    return x;
  };
  std::vector<int32_t> mask(B * T, 1);
  for (int64_t t = 2 * T / 3; t < T; ++t) mask[T + t] = 0;
  const std::vector<float> qv = rounded(B * T * C, magnitude), pkv = rounded(R, magnitude);
  float largest = 0;
  for (int64_t i = 0; i < B * T; ++i)
    for (int64_t r = 0; r < 2 * s.span(); ++r)
      for (int64_t h = 0; h < s.heads; ++h) {
        float dot = 0;
        for (int64_t e = h * s.head_dim; e < (h + 1) * s.head_dim; ++e)
          dot += qv[i * C + e] * pkv[r * C + e];
        largest = std::max(largest, std::fabs(dot));
      }
  const std::vector<float> kv = rounded(B * T * C, magnitude), vv = rounded(B * T * C, 1.0f),
                           pqv = rounded(R, magnitude), dov = rounded(B * T * C, 1.0f);
  OpRun ref(s, B, T, dev, qv, kv, vv, pkv, pqv, dov, mask, 0.25f);
  ref.forward();
  ref.backward();
  OpRun cpu(s, B, T, Device::cpu(), qv, kv, vv, pkv, pqv, dov, mask, 0.25f);  // for a device
  if (!dev.is_cpu()) cpu.forward(), cpu.backward();
  const Shape NC{B * T, C};
  DeviceTensor q = cast_to(ref.q, dtype), k = cast_to(ref.k, dtype), v = cast_to(ref.v, dtype),
               pk = cast_to(ref.pk, dtype), pq = cast_to(ref.pq, dtype),
               dout = cast_to(ref.dout, dtype);
  DeviceTensor out(dev, dtype, NC), dq(dev, dtype, NC), dk(dev, dtype, NC), dv(dev, dtype, NC),
      dpk = poisoned({2 * s.span(), C}, dev), dpq = poisoned({2 * s.span(), C}, dev);
  const DisentangledBuffers bufs = disentangled_attention_buffers(s, dev, B, T, true, dtype);
  DeviceTensor saved = poisoned({bufs.saved}, dev), ws = zeros({bufs.workspace}, dev);
  DisentangledCall call = ref.call;
  EXPECT_GT(bufs.workspace, ref.ws.view().numel());
  EXPECT_THROW(disentangled_attention_forward(call, out.view(), saved.view(), q.view(), k.view(),
                                              v.view(), pk.view(), pq.view()),
               ShapeError);  // ref's workspace has no room for the 16-bit path's buffers
  call.workspace = ws.view();
  auto run_backward = [&] {
    disentangled_attention_backward(call, dq.view(), dk.view(), dv.view(), dpk.view(), dpq.view(),
                                    dout.view(), q.view(), k.view(), v.view(), pk.view(),
                                    pq.view(), saved.view());
  };
  const GpuPathCounts paths0 = gpu_path_counts();
  disentangled_attention_forward(call, out.view(), saved.view(), q.view(), k.view(), v.view(),
                                 pk.view(), pq.view());
  run_backward();
  const bool exact = dev.is_cpu();
  if (!exact) {
    EXPECT_EQ((gpu_path_counts() - paths0)[GpuPath::DisentangledFused16], 2);
  }
  auto want16 = [&](const DeviceTensor& t) { return cast_to(cast_to(t, dtype), DType::F32); };
  auto got32 = [](const DeviceTensor& t) { return cast_to(t, DType::F32); };
  const double tol = dtype == DType::BF16 ? kTol16Bf16 : kTol16F16;
  for (const auto& [name, got, want, want_cpu] :
       {std::tuple{"out", &out, &ref.out, &cpu.out}, {"dq", &dq, &ref.dq, &cpu.dq},
        {"dk", &dk, &ref.dk, &cpu.dk}, {"dv", &dv, &ref.dv, &cpu.dv}}) {
    const std::vector<float> g = to_vector(got32(*got).view());
    if (exact) {
      EXPECT_EQ(g, to_vector(want16(*want).view())) << name;
    } else {
      expect_close(g, to_vector(want_cpu->view()), tol, name);
    }
    EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float e) { return std::isfinite(e); })) << name;
  }
  for (const auto& [name, on, got, want, want_cpu] :
       {std::tuple{"dpk", s.c2p, &dpk, &ref.dpk, &cpu.dpk},
        std::tuple{"dpq", s.p2c, &dpq, &ref.dpq, &cpu.dpq}}) {
    if (!on) continue;
    if (exact) {
      EXPECT_EQ(to_vector(got->view()), to_vector(want->view())) << name;
    } else {
      expect_close(to_vector(got->view()), to_vector(want_cpu->view()), tol, name);
    }
  }
  if (!exact) {
    const std::vector<float> dq1 = to_vector(got32(dq).view()), dpk1 = to_vector(dpk.view());
    run_backward();
    EXPECT_EQ(to_vector(got32(dq).view()), dq1) << "a rerun of backward changed dq's bits";
    if (s.c2p) {
      EXPECT_EQ(to_vector(dpk.view()), dpk1) << "a rerun of backward changed dpk's bits";
    }
  }
  return largest;
}

TEST_P(DisentangledAttentionTest, Bf16StorageGivesTheFp32ResultsRoundedOnce) {
  expect_16bit_storage_gives_fp32_results(device(), rng, DType::BF16, 1.0f);
}

// f16 with large activations, where HF's eager fp16 DeBERTa overflows: it forms the c2p / p2c
// products q . pk unscaled in fp16 (torch.bmm, then / scale), so |q . pk| past 65504 becomes inf
// and the softmax of a row holding inf gives NaN (tools/deberta_fp16_overflow.py shows it with
// transformers). Here q, k, pk, pq reach 240 (f16-representable), 3-element heads: products up to
// 1.7e5, over f16's range. The op scales and normalises in fp32 (statistics included), so f16
// storage gives the fp32 op's finite results, rounded once.
TEST_P(DisentangledAttentionTest, F16WithProductsPastItsRangeGivesTheFp32Results) {
  EXPECT_GT(expect_16bit_storage_gives_fp32_results(device(), rng, DType::F16, 240.0f), 65504.0f);
}

// The same at the device test's shapes below (a model's head size, T past the bucket window and
// not a multiple of the tiles, c2p or p2c alone, plain clamped distances): on the CPU, which reads
// 16-bit blocks per (sequence, head), the results are the fp32 op's bits rounded once, as they
// were when it computed on whole fp32 copies; its workspace holds a few blocks per thread instead
// of copies of every tensor (7 N C + 4 R C floats for backward). On CUDA: the tensor-core path.
TEST_P(DisentangledAttentionTest, Bf16AndF16StorageAcrossShapesGiveTheFp32Results) {
  struct Case {
    int64_t H, D, buckets, max_rel, T;
    bool c2p, p2c;
  };
  for (const Case& c : {Case{2, 64, 16, 64, 70, true, true}, Case{2, 32, 8, 16, 45, true, false},
                        Case{2, 32, 8, 16, 45, false, true}, Case{2, 16, 0, 6, 19, true, true}}) {
    SCOPED_TRACE(::testing::Message() << "H " << c.H << " D " << c.D << " T " << c.T);
    DisentangledSpec s;
    s.heads = c.H, s.head_dim = c.D, s.c2p = c.c2p, s.p2c = c.p2c;
    s.position_buckets = c.buckets, s.max_relative_positions = c.max_rel;
    expect_16bit_storage_gives_fp32_results(device(), rng, DType::BF16, 1.0f, s, c.T);
    expect_16bit_storage_gives_fp32_results(device(), rng, DType::F16, 1.0f, s, c.T);
  }
}

TEST(DisentangledAttentionBuffers, CpuReadsSixteenBitBlocksNotWholeCopies) {
  DisentangledSpec s;  // DeBERTa-v3-base, 8 x 512 tokens
  s.heads = 12, s.head_dim = 64, s.c2p = s.p2c = true, s.position_buckets = 256,
  s.max_relative_positions = 512;
  const int64_t B = 8, T = 512, NC = B * T * 768;
  const int64_t W = deberta_relative_index(s, T - 1) - deberta_relative_index(s, -(T - 1)) + 1;
  for (bool backward : {false, true}) {
    const int64_t f32 =
        disentangled_attention_buffers(s, Device::cpu(), B, T, backward).workspace;
    const int64_t bf16 =
        disentangled_attention_buffers(s, Device::cpu(), B, T, backward, DType::BF16).workspace;
    const int64_t blocks = backward ? 7 * T * 64 + 4 * W * 64 : 4 * T * 64 + 2 * W * 64;
    EXPECT_EQ(bf16 - f32, compute_threads() * blocks) << backward;
    EXPECT_LT(bf16 - f32, NC / 4) << backward;
  }
}

// The device's kernel against the CPU reference on the same inputs, at shapes the fused CUDA
// kernel tiles unevenly (T not a multiple of its tiles, longer than the bucket window, head sizes
// picking different tiles), with padding and dropout; its backward gives the same bits twice, and
// gpu_paths counts each pass. Compares a device with the CPU: nothing to do on the CPU itself.
TEST_P(DisentangledAttentionTest, DeviceKernelMatchesTheCpuAcrossShapes) {
  if (device().is_cpu()) GTEST_SKIP() << "compares a device with the CPU";
  struct Case {
    int64_t H, D, buckets, max_rel, B, T;
    bool c2p, p2c;
    int64_t pad;
    float p;
  };
  for (const Case& c : {Case{3, 8, 8, 16, 2, 37, true, true, 10, 0.1f},
                        Case{2, 64, 16, 64, 2, 130, true, true, 40, 0.0f},
                        Case{12, 64, 256, 512, 1, 300, true, true, 0, 0.1f},
                        Case{2, 32, 8, 16, 2, 45, true, false, 7, 0.2f},
                        Case{2, 32, 8, 16, 2, 45, false, true, 7, 0.0f},
                        Case{2, 16, 0, 6, 3, 19, true, true, 5, 0.1f}}) {
    SCOPED_TRACE(::testing::Message() << "H " << c.H << " D " << c.D << " T " << c.T);
    DisentangledSpec s;
    s.heads = c.H, s.head_dim = c.D, s.c2p = c.c2p, s.p2c = c.p2c;
    s.position_buckets = c.buckets, s.max_relative_positions = c.max_rel;
    const int64_t N = c.B * c.T, C = c.H * c.D, R = 2 * s.span() * C;
    const std::vector<float> q = random_values(N * C, rng), k = random_values(N * C, rng),
                             v = random_values(N * C, rng), pk = random_values(R, rng),
                             pq = random_values(R, rng), dout = random_values(N * C, rng);
    std::vector<int32_t> mask(N, 1);
    for (int64_t t = c.T - c.pad; t < c.T; ++t) mask[(c.B - 1) * c.T + t] = 0;
    OpRun want(s, c.B, c.T, Device::cpu(), q, k, v, pk, pq, dout, mask, c.p);
    OpRun got(s, c.B, c.T, device(), q, k, v, pk, pq, dout, mask, c.p);
    want.forward();
    want.backward();
    const GpuPathCounts before = gpu_path_counts();
    got.forward();
    got.backward();
    EXPECT_EQ((gpu_path_counts() - before)[GpuPath::DisentangledFused], 2);
    EXPECT_LE(max_rel_error(got.out.view(), want.out.view()), 1e-5) << "out";
    EXPECT_LE(max_rel_error(got.dq.view(), want.dq.view()), 5e-5) << "dq";
    EXPECT_LE(max_rel_error(got.dk.view(), want.dk.view()), 5e-5) << "dk";
    EXPECT_LE(max_rel_error(got.dv.view(), want.dv.view()), 5e-5) << "dv";
    if (c.c2p) {
      EXPECT_LE(max_rel_error(got.dpk.view(), want.dpk.view()), 5e-5) << "dpk";
    }
    if (c.p2c) {
      EXPECT_LE(max_rel_error(got.dpq.view(), want.dpq.view()), 5e-5) << "dpq";
    }
    const std::vector<float> dq1 = to_vector(got.dq.view()), dpk1 = to_vector(got.dpk.view());
    got.backward();
    EXPECT_EQ(to_vector(got.dq.view()), dq1) << "a rerun of backward changed dq's bits";
    if (c.c2p) {
      EXPECT_EQ(to_vector(got.dpk.view()), dpk1) << "a rerun changed dpk's bits";
    }
  }
}

FTUNE_INSTANTIATE_DEVICES(DisentangledAttentionTest);

}  // namespace
}  // namespace ftune::test
