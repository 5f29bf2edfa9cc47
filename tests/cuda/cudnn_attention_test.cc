// cuDNN flash attention wrapper (cuda/cudnn_attention.h). Everywhere: the shape rules, the build's
// own account of whether it is compiled in, and a clean refusal (no crash) without a GPU. On a GPU
// with cuDNN attention compiled in: bf16 forward (output and log-sum-exp statistics) and backward
// on ftune's fused QKV layout against a double-precision reference with right-padded sequences,
// zero gradients for padding keys, the mask -> sequence-length kernel, and dropout that is
// reproducible for one (seed, offset) and changes with the seed; packed rows through cuDNN's ragged
// offsets against the same reference. Everywhere: the ragged offsets' arithmetic.
#include "cuda/cudnn_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "cuda/cuda_libraries.h"
#include "test_util.h"

#ifdef FTUNE_WITH_CUDA
#include "cuda/cuda_device.h"
#endif

namespace ftune::cuda {
namespace {

TEST(CudnnSdpa, BuildSaysWhetherItIsCompiledIn) {
  const std::string note = cudnn_sdpa_build_note();
  EXPECT_FALSE(note.empty());
  if (cudnn_sdpa_compiled()) EXPECT_NE(note.find("cudnn_frontend"), std::string::npos) << note;
}

// Packed rows of lengths 3, 1, 4 (cu_seqlens 0 3 4 8), C = 6: each sequence's length and the
// element offsets of its first token in qkv (N, 3C) and out (N, C); entry B is the end.
TEST(CudnnSdpa, RaggedOffsetsFromCuSeqlens) {
  const int32_t cu[] = {0, 3, 4, 8};
  const int64_t B = 3, C = 6;
  const int32_t lens[] = {3, 1, 4};
  for (int64_t b = 0; b <= B; ++b) {
    const SdpaRaggedEntry e = sdpa_ragged_entry(cu, B, C, b);
    EXPECT_EQ(e.seq_len, b < B ? lens[b] : 0) << b;
    EXPECT_EQ(e.qkv_offset, int64_t{cu[b]} * 3 * C) << b;
    EXPECT_EQ(e.out_offset, int64_t{cu[b]} * C) << b;
  }
  // Offsets past 2^31 elements stay exact (i64): 100k tokens of 3 x 12 heads x 64.
  const int32_t big[] = {0, 100000};
  EXPECT_EQ(sdpa_ragged_entry(big, 1, 768, 1).qkv_offset, int64_t{100000} * 3 * 768);
  SdpaShape s{2, 8, 1, 8, SdpaDtype::BF16, 0.0f};
  EXPECT_EQ(s.rows(), 16);
  s.ragged = true;
  s.tokens = 11;
  EXPECT_EQ(s.rows(), 11);
}

#ifdef FTUNE_WITH_CUDA

SdpaShape bert_base() {
  return {32, 128, 12, 64, SdpaDtype::BF16, 0.1f};
}

TEST(CudnnSdpa, ShapeRules) {
  EXPECT_EQ(sdpa_shape_problem(bert_base()), "");
  SdpaShape s = bert_base();
  s.D = 60;
  EXPECT_NE(sdpa_shape_problem(s).find("head dimension 60"), std::string::npos);
  s.D = 256;
  EXPECT_NE(sdpa_shape_problem(s).find("head dimension 256"), std::string::npos);
  s = bert_base();
  s.T = 0;
  EXPECT_NE(sdpa_shape_problem(s).find("must be positive"), std::string::npos);
  s = bert_base();
  s.dropout = 1.0f;
  EXPECT_NE(sdpa_shape_problem(s).find("dropout"), std::string::npos);
  s = bert_base();
  s.H = 1;
  s.D = 8;
  EXPECT_EQ(sdpa_shape_problem(s), "");
}

TEST(CudnnSdpa, RefusesCleanlyWithoutAGpu) {
  if (device_count() > 0) GTEST_SKIP() << "a GPU is present";
  std::string why;
  EXPECT_FALSE(cudnn_sdpa_supported(bert_base(), &why));
  EXPECT_FALSE(why.empty());
  EXPECT_THROW(cudnn_sdpa_workspace_bytes(bert_base()), DeviceError);
  // A refused shape is refused again, with the same reason.
  std::string again;
  EXPECT_FALSE(cudnn_sdpa_supported(bert_base(), &again));
  EXPECT_EQ(again, why);
}

// Double-precision attention on the fused layout: keys at or after lens[b] are masked, every query
// row is computed. Returns out (B*T, C), lse (B, H, T) and, given dout, dqkv (B*T, 3C).
struct Reference {
  std::vector<double> out, lse, dqkv;
};

Reference reference(const std::vector<float>& qkv, const std::vector<float>& dout,
                    const std::vector<int>& lens, int64_t B, int64_t T, int64_t H, int64_t D) {
  const int64_t C = H * D;
  const double scale = 1.0 / std::sqrt(double(D));
  Reference r{std::vector<double>(B * T * C), std::vector<double>(B * H * T),
              std::vector<double>(B * T * 3 * C, 0.0)};
  auto x = [&](int64_t b, int64_t t, int part, int64_t h, int64_t d) {
    return double(qkv[(b * T + t) * 3 * C + part * C + h * D + d]);
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t L = lens[b];
        std::vector<double> p(L);
        double mx = -INFINITY;
        for (int64_t j = 0; j < L; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += x(b, i, 0, h, d) * x(b, j, 1, h, d);
          p[j] = s * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (double& v : p) sum += (v = std::exp(v - mx));
        r.lse[(b * H + h) * T + i] = mx + std::log(sum);
        for (double& v : p) v /= sum;
        // out_i = sum_j P_ij v_j;  dP_ij = dO_i . v_j;  dS = P (dP - sum_j P dP)
        std::vector<double> dp(L);
        double rsum = 0;
        for (int64_t j = 0; j < L; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) {
            r.out[(b * T + i) * C + h * D + d] += p[j] * x(b, j, 2, h, d);
            dot += double(dout[(b * T + i) * C + h * D + d]) * x(b, j, 2, h, d);
          }
          dp[j] = dot;
          rsum += p[j] * dot;
        }
        for (int64_t j = 0; j < L; ++j) {
          const double ds = p[j] * (dp[j] - rsum);
          for (int64_t d = 0; d < D; ++d) {
            const double go = double(dout[(b * T + i) * C + h * D + d]);
            r.dqkv[(b * T + i) * 3 * C + h * D + d] += scale * ds * x(b, j, 1, h, d);
            r.dqkv[(b * T + j) * 3 * C + C + h * D + d] += scale * ds * x(b, i, 0, h, d);
            r.dqkv[(b * T + j) * 3 * C + 2 * C + h * D + d] += p[j] * go;
          }
        }
      }
  return r;
}

std::vector<bf16_t> to_bf16(const std::vector<float>& v) {
  std::vector<bf16_t> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = float_to_bf16(v[i]);
  return o;
}
std::vector<float> from_bf16(const std::vector<bf16_t>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = bf16_to_float(v[i]);
  return o;
}

// max |a - ref| / max |ref|
double normalised_error(const std::vector<float>& a, const std::vector<double>& ref) {
  double err = 0, mag = 1e-12;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(double(a[i]) - ref[i]));
    mag = std::max(mag, std::fabs(ref[i]));
  }
  return err / mag;
}

// Device buffers freed at the end of the test.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) : p(cuda::malloc(Device::cuda(0), bytes)) {}
  ~DeviceBuffer() { cuda::free(Device::cuda(0), p); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

template <typename T>
void upload(const DeviceBuffer& d, const std::vector<T>& h) {
  cuda::memcpy(d.p, Device::cuda(0), h.data(), Device::cpu(), h.size() * sizeof(T));
}
template <typename T>
std::vector<T> download(const DeviceBuffer& d, size_t n) {
  std::vector<T> h(n);
  cuda::memcpy(h.data(), Device::cpu(), d.p, Device::cuda(0), n * sizeof(T));
  return h;
}

class CudnnSdpaGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    if (!cudnn_sdpa_compiled())
      FTUNE_SKIP_OR_REQUIRE_CUDNN("not compiled: " + cudnn_sdpa_build_note());
  }
};

TEST_F(CudnnSdpaGpu, ForwardAndBackwardMatchTheReferenceWithPadding) {
  const int64_t B = 3, T = 40, H = 2, D = 64, C = H * D;
  SdpaShape shape{B, T, H, D, SdpaDtype::BF16, 0.0f};
  std::string why;
  if (!cudnn_sdpa_supported(shape, &why)) FTUNE_SKIP_OR_REQUIRE_CUDNN(why);
  const std::vector<int> lens = {40, 17, 1};  // full, padded, only [CLS]
  std::vector<int32_t> mask(B * T, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < lens[b]; ++t) mask[b * T + t] = 1;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> qkv(B * T * 3 * C), dout(B * T * C);
  for (float& v : qkv) v = u(rng);
  for (float& v : dout) v = u(rng);
  qkv = from_bf16(to_bf16(qkv));  // the reference sees exactly the bf16 inputs
  dout = from_bf16(to_bf16(dout));
  const Reference ref = reference(qkv, dout, lens, B, T, H, D);

  const size_t ws_bytes = cudnn_sdpa_workspace_bytes(shape);
  DeviceBuffer d_qkv(qkv.size() * 2), d_out(B * T * C * 2), d_stats(B * H * T * 4),
      d_mask(mask.size() * 4), d_lens(2 * B * 4), d_rng(16), d_dout(dout.size() * 2),
      d_dqkv(qkv.size() * 2), d_ws(std::max<size_t>(ws_bytes, 1));
  upload(d_qkv, to_bf16(qkv));
  upload(d_dout, to_bf16(dout));
  upload(d_mask, mask);
  // Poison the outputs: every element must be written.
  upload(d_out, std::vector<bf16_t>(B * T * C, float_to_bf16(NAN)));
  upload(d_dqkv, std::vector<bf16_t>(qkv.size(), float_to_bf16(NAN)));

  sdpa_seq_lens_from_mask(d_lens.as<int32_t>(), d_mask.as<int32_t>(), B, T);
  sdpa_write_rng(d_rng.as<int64_t>(), RngKey{1234}, 0);
  const std::vector<int32_t> seq = download<int32_t>(d_lens, 2 * B);
  for (int64_t b = 0; b < B; ++b) {
    EXPECT_EQ(seq[b], T);
    EXPECT_EQ(seq[B + b], lens[b]);
  }
  cudnn_sdpa_forward(d_out.p, d_stats.as<float>(), d_qkv.p, d_lens.as<int32_t>(), nullptr,
                     d_rng.as<int64_t>(), shape, d_ws.p, ws_bytes);
  cudnn_sdpa_backward(d_dqkv.p, d_dout.p, d_qkv.p, d_out.p, d_stats.as<float>(),
                      d_lens.as<int32_t>(), nullptr, d_rng.as<int64_t>(), shape, d_ws.p, ws_bytes);
  synchronize(Device::cuda(0));

  const std::vector<float> out = from_bf16(download<bf16_t>(d_out, B * T * C));
  const std::vector<float> stats = download<float>(d_stats, B * H * T);
  const std::vector<float> dqkv = from_bf16(download<bf16_t>(d_dqkv, qkv.size()));
  EXPECT_LE(normalised_error(out, ref.out), 2e-2);
  EXPECT_LE(normalised_error(stats, ref.lse), 1e-2);
  EXPECT_LE(normalised_error(dqkv, ref.dqkv), 2e-2);
  // Padding keys get exactly zero dk and dv.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = lens[b]; t < T; ++t)
      for (int64_t c = C; c < 3 * C; ++c) ASSERT_EQ(dqkv[(b * T + t) * 3 * C + c], 0.0f) << b << t;

  // A workspace smaller than planned is refused before anything runs.
  if (ws_bytes > 0)
    EXPECT_THROW(cudnn_sdpa_forward(d_out.p, d_stats.as<float>(), d_qkv.p, d_lens.as<int32_t>(),
                                    nullptr, d_rng.as<int64_t>(), shape, d_ws.p, ws_bytes - 1),
                 ShapeError);
}

// The same sequences packed back to back (N tokens, no padding) through the ragged layout: out,
// stats and dqkv of every token equal the padded reference's at the sequence's real tokens (the
// reference's padding queries get dout 0, so they add nothing to dk and dv). sm_90 and newer;
// elsewhere cuDNN refuses ragged graphs (a skip, a failure with FTUNE_REQUIRE_CUDNN).
TEST_F(CudnnSdpaGpu, PackedRowsThroughRaggedOffsetsMatchTheReference) {
  const int64_t B = 3, T = 40, H = 2, D = 64, C = H * D;
  const std::vector<int> lens = {40, 17, 1};
  const std::vector<int32_t> cu = {0, 40, 57, 58};
  const int64_t N = cu[B];
  SdpaShape shape{B, T, H, D, SdpaDtype::BF16, 0.0f, true, N};
  std::string why;
  if (!cudnn_sdpa_supported(shape, &why)) FTUNE_SKIP_OR_REQUIRE_CUDNN(why);
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> qkv(B * T * 3 * C), dout(B * T * C, 0.0f);
  for (float& v : qkv) v = u(rng);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < lens[b]; ++t)
      for (int64_t c = 0; c < C; ++c) dout[(b * T + t) * C + c] = u(rng);
  qkv = from_bf16(to_bf16(qkv));
  dout = from_bf16(to_bf16(dout));
  const Reference ref = reference(qkv, dout, lens, B, T, H, D);
  // The packed copies: row b's real tokens at cu[b].
  std::vector<float> pqkv(N * 3 * C), pdout(N * C);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < lens[b]; ++t) {
      std::copy_n(&qkv[(b * T + t) * 3 * C], 3 * C, &pqkv[(cu[b] + t) * 3 * C]);
      std::copy_n(&dout[(b * T + t) * C], C, &pdout[(cu[b] + t) * C]);
    }
  const size_t ws_bytes = cudnn_sdpa_workspace_bytes(shape);
  DeviceBuffer d_qkv(pqkv.size() * 2), d_out(N * C * 2), d_stats(B * H * T * 4), d_cu(4 * (B + 1)),
      d_lens(2 * B * 4), d_ragged(16 * (B + 1)), d_rng(16), d_dout(pdout.size() * 2),
      d_dqkv(pqkv.size() * 2), d_ws(std::max<size_t>(ws_bytes, 1));
  upload(d_qkv, to_bf16(pqkv));
  upload(d_dout, to_bf16(pdout));
  upload(d_cu, cu);
  upload(d_out, std::vector<bf16_t>(N * C, float_to_bf16(NAN)));
  upload(d_dqkv, std::vector<bf16_t>(pqkv.size(), float_to_bf16(NAN)));
  sdpa_ragged_from_cu(d_lens.as<int32_t>(), d_ragged.as<int64_t>(), d_cu.as<int32_t>(), B, C);
  sdpa_write_rng(d_rng.as<int64_t>(), RngKey{1234}, 0);
  const std::vector<int32_t> seq = download<int32_t>(d_lens, 2 * B);
  const std::vector<int64_t> offs = download<int64_t>(d_ragged, 2 * (B + 1));
  for (int64_t b = 0; b <= B; ++b) {
    if (b < B) EXPECT_EQ(seq[b], lens[b]);
    if (b < B) EXPECT_EQ(seq[B + b], lens[b]);
    EXPECT_EQ(offs[b], int64_t{cu[b]} * 3 * C);
    EXPECT_EQ(offs[B + 1 + b], int64_t{cu[b]} * C);
  }
  cudnn_sdpa_forward(d_out.p, d_stats.as<float>(), d_qkv.p, d_lens.as<int32_t>(),
                     d_ragged.as<int64_t>(), d_rng.as<int64_t>(), shape, d_ws.p, ws_bytes);
  cudnn_sdpa_backward(d_dqkv.p, d_dout.p, d_qkv.p, d_out.p, d_stats.as<float>(),
                      d_lens.as<int32_t>(), d_ragged.as<int64_t>(), d_rng.as<int64_t>(), shape,
                      d_ws.p, ws_bytes);
  synchronize(Device::cuda(0));
  const std::vector<float> out = from_bf16(download<bf16_t>(d_out, N * C));
  const std::vector<float> stats = download<float>(d_stats, B * H * T);
  const std::vector<float> dqkv = from_bf16(download<bf16_t>(d_dqkv, pqkv.size()));
  std::vector<float> out_real, stats_real, dqkv_real;
  std::vector<double> ref_out, ref_stats, ref_dqkv;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < lens[b]; ++t) {
      for (int64_t c = 0; c < C; ++c) {
        out_real.push_back(out[(cu[b] + t) * C + c]);
        ref_out.push_back(ref.out[(b * T + t) * C + c]);
      }
      for (int64_t c = 0; c < 3 * C; ++c) {
        dqkv_real.push_back(dqkv[(cu[b] + t) * 3 * C + c]);
        ref_dqkv.push_back(ref.dqkv[(b * T + t) * 3 * C + c]);
      }
      for (int64_t h = 0; h < H; ++h) {
        stats_real.push_back(stats[(b * H + h) * T + t]);
        ref_stats.push_back(ref.lse[(b * H + h) * T + t]);
      }
    }
  EXPECT_LE(normalised_error(out_real, ref_out), 2e-2);
  EXPECT_LE(normalised_error(stats_real, ref_stats), 1e-2);
  EXPECT_LE(normalised_error(dqkv_real, ref_dqkv), 2e-2);
}

TEST_F(CudnnSdpaGpu, DropoutIsReproducibleForASeedAndChangesWithIt) {
  const int64_t B = 2, T = 64, H = 2, D = 64, C = H * D;
  SdpaShape shape{B, T, H, D, SdpaDtype::BF16, 0.2f};
  std::string why;
  if (!cudnn_sdpa_supported(shape, &why)) FTUNE_SKIP_OR_REQUIRE_CUDNN(why);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> qkv(B * T * 3 * C);
  for (float& v : qkv) v = u(rng);
  const size_t ws_bytes = cudnn_sdpa_workspace_bytes(shape);
  DeviceBuffer d_qkv(qkv.size() * 2), d_out(B * T * C * 2), d_stats(B * H * T * 4),
      d_mask(B * T * 4), d_lens(2 * B * 4), d_rng(16), d_ws(std::max<size_t>(ws_bytes, 1));
  upload(d_qkv, to_bf16(qkv));
  upload(d_mask, std::vector<int32_t>(B * T, 1));
  sdpa_seq_lens_from_mask(d_lens.as<int32_t>(), d_mask.as<int32_t>(), B, T);
  auto run = [&](int64_t seed) {
    sdpa_write_rng(d_rng.as<int64_t>(), RngKey{static_cast<uint64_t>(seed)}, 0);
    cudnn_sdpa_forward(d_out.p, d_stats.as<float>(), d_qkv.p, d_lens.as<int32_t>(), nullptr,
                       d_rng.as<int64_t>(), shape, d_ws.p, ws_bytes);
    synchronize(Device::cuda(0));
    return from_bf16(download<bf16_t>(d_out, B * T * C));
  };
  const auto a = run(1), b = run(1), c = run(2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (float v : a) ASSERT_TRUE(std::isfinite(v));
}

#endif  // FTUNE_WITH_CUDA

}  // namespace
}  // namespace ftune::cuda
