// cuBLASLt GEMMs (cuda/gemm.h) against a CPU reference computed in double from the inputs as the
// device sees them (rounded to bf16 / f16 first): every supported type combination, every
// epilogue (an f32 bias, and a 16-bit bias of a 16-bit C), fused (aligned vectors) and unfused
// (misaligned) paths, transposes, beta = 0 on NaN-poisoned outputs and beta = 1 on random C (which
// also shows that timing the candidates of a new shape never touches the caller's buffers), the
// path each call took (core/gpu_paths.h: aligned calls never run the naive kernel, and the bias
// epilogue of a 16-bit C with its own 16-bit bias is fused), and the algorithm cache: a timed
// shape is written to the cache file when saved and taken from it again. cuBLASLt is CUDA only:
// the CPU parameter is skipped.
#include "cuda/gemm.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/gpu_paths.h"
#include "core/memory.h"
#include "op_test_util.h"

#ifdef FTUNE_WITH_CUDA
#include <unistd.h>

#include "cuda/gemm_algo_cache.h"
#include "io/json_file.h"

namespace ftune::test {
namespace {

using cuda::GemmEpilogue;

// The whole test process writes its algorithm cache to a private file (unless the caller chose
// one), removed at exit: tests never touch the user's ~/.cache. Set before main(), i.e. before any
// GEMM reads the variable.
[[maybe_unused]] const std::string g_cache_dir = [] {
  if (std::getenv("FTUNE_GEMM_CACHE")) return std::string();
  char tmpl[] = "/tmp/ftune_gemm_test_XXXXXX";
  if (!::mkdtemp(tmpl)) return std::string();
  const std::string dir = tmpl;
  ::setenv("FTUNE_GEMM_CACHE", (dir + "/gemm_algorithms.json").c_str(), 1);
  std::atexit([] {
    std::error_code ec;
    if (const char* p = std::getenv("FTUNE_GEMM_CACHE"))
      std::filesystem::remove_all(std::filesystem::path(p).parent_path(), ec);
  });
  return dir;
}();

float round_to(DType t, float x) {
  if (t == DType::BF16) return bf16_to_float(float_to_bf16(x));
  if (t == DType::F16) return f16_to_float(float_to_f16(x));
  return x;
}

// A device buffer of n elements of type t (plus `offset` leading elements, so that the data
// pointer can be made misaligned), filled from / read back to f32 host values.
class Buffer {
 public:
  Buffer(Device device, DType t, int64_t n, int64_t offset = 0)
      : t_(t), n_(n), offset_(offset), mem_(device, t, Shape{n + offset}) {}
  void* data() const { return static_cast<char*>(mem_.view().data) + offset_ * dtype_size(t_); }
  // Rounds `values` to the buffer's type in place and uploads them.
  void upload(std::vector<float>& values) {
    HostTensor h(t_, Shape{n_ + offset_});
    for (int64_t i = 0; i < n_ + offset_; ++i) {
      const float v = i < offset_ ? 0.0f : round_to(t_, values[i - offset_]);
      if (i >= offset_) values[i - offset_] = v;
      if (t_ == DType::F32) h.data<float>()[i] = v;
      if (t_ == DType::BF16) h.data<bf16_t>()[i] = float_to_bf16(v);
      if (t_ == DType::F16) h.data<f16_t>()[i] = float_to_f16(v);
    }
    copy(mem_.view(), h.view());
  }
  std::vector<float> download() const {
    HostTensor h(t_, Shape{n_ + offset_});
    copy(h.view(), mem_.view());
    std::vector<float> out(n_);
    for (int64_t i = 0; i < n_; ++i) {
      const int64_t j = i + offset_;
      out[i] = t_ == DType::F32    ? h.data<float>()[j]
               : t_ == DType::BF16 ? bf16_to_float(h.data<bf16_t>()[j])
                                   : f16_to_float(h.data<f16_t>()[j]);
    }
    return out;
  }

 private:
  DType t_;
  int64_t n_, offset_;
  DeviceTensor mem_;
};

// max |got - ref| / max |ref|, NaN counting as infinitely wrong.
double norm_error(const std::vector<float>& got, const std::vector<double>& ref) {
  double scale = 1e-6, worst = 0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - ref[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst / scale;
}

struct TypeCase {
  DType ab, c;
  bool tf32;
  double tol;  // normalised error allowed for D
  const char* name;
};

const TypeCase kTypes[] = {
    {DType::F32, DType::F32, false, 2e-5, "f32"},
    {DType::F32, DType::F32, true, 5e-3, "tf32"},
    {DType::BF16, DType::BF16, false, 2e-2, "bf16->bf16"},
    {DType::BF16, DType::F32, false, 1e-4, "bf16->f32"},
    {DType::F16, DType::F16, false, 4e-3, "f16->f16"},
    {DType::F16, DType::F32, false, 1e-4, "f16->f32"},
};

// None, Bias with an f32 bias, Bias with a bias of C's type (16-bit C), BgradOpA.
struct EpilogueCase {
  GemmEpilogue ep;
  bool bias_of_c;
};
const EpilogueCase kEpilogues[] = {
    {GemmEpilogue::None, false},
    {GemmEpilogue::Bias, false},
    {GemmEpilogue::Bias, true},
    {GemmEpilogue::BgradOpA, false},
};

class GemmTest : public OpTest {
 protected:
  void SetUp() override {
    if (device().kind != DeviceKind::CUDA) GTEST_SKIP() << "cuBLASLt GEMMs are CUDA only";
  }

  // One call against the reference. `misaligned` puts bias / bias_grad an element off 16-byte
  // alignment and gives A, B and C leading dimensions that are not multiples of 8: the unfused
  // path. Otherwise every leading dimension is a multiple of 8 where the sizes are, and cuBLASLt's
  // fused epilogue runs where it supports the combination. bias_of_c: the bias has C's type (when
  // C is 16-bit; else the case is skipped).
  void check(const TypeCase& tc, EpilogueCase ec, bool ta, bool tb, int64_t M, int64_t N,
             int64_t K, float beta, bool misaligned) {
    const GemmEpilogue ep = ec.ep;
    if (ec.bias_of_c && tc.c == DType::F32) return;
    if (ep == GemmEpilogue::BgradOpA && !ta) return;  // the bias gradient of dW = dout^T x only
    SCOPED_TRACE(::testing::Message()
                 << tc.name << " epilogue " << cuda::gemm_epilogue_name(ep)
                 << (ec.bias_of_c ? " (bias of C's type)" : "") << " ta " << ta << " tb " << tb
                 << " M " << M << " N " << N << " K " << K << " beta " << beta
                 << (misaligned ? " misaligned" : " aligned") << " seed " << test_seed());
    cuda::set_gemm_tf32(tc.tf32);
    const float alpha = 0.75f;
    // Padded rows: multiples of 8 elements where the sizes are (the fused path), odd otherwise.
    const int64_t pad = misaligned ? 1 : 8;
    const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + (misaligned ? 3 : 8),
                  ldc = N + pad;
    const int64_t a_rows = ta ? K : M, b_rows = tb ? N : K;
    const int64_t off = misaligned ? 1 : 0;
    const bool uses_bias = ep == GemmEpilogue::Bias;
    const bool bgrad = ep == GemmEpilogue::BgradOpA;
    const DType bias_type = ec.bias_of_c ? tc.c : DType::F32;

    auto a = random_values(a_rows * lda, rng), b = random_values(b_rows * ldb, rng);
    auto c0 = beta != 0.0f ? random_values(M * ldc, rng)
                           : std::vector<float>(M * ldc, std::nanf(""));
    auto bias = random_values(N, rng);
    std::vector<float> bg0(M, std::nanf(""));
    Buffer da(device(), tc.ab, a_rows * lda), db(device(), tc.ab, b_rows * ldb),
        dc(device(), tc.c, M * ldc), dbias(device(), bias_type, N, off),
        dbg(device(), DType::F32, M, off);
    da.upload(a);
    db.upload(b);
    dc.upload(c0);
    dbias.upload(bias);  // rounded to the bias type: the reference adds what the device adds
    dbg.upload(bg0);

    cuda::GemmArgs g;
    g.trans_a = ta;
    g.trans_b = tb;
    g.M = M;
    g.N = N;
    g.K = K;
    g.alpha = alpha;
    g.beta = beta;
    g.A = da.data();
    g.a_type = tc.ab;
    g.lda = lda;
    g.B = db.data();
    g.b_type = tc.ab;
    g.ldb = ldb;
    g.C = dc.data();
    g.c_type = tc.c;
    g.ldc = ldc;
    g.epilogue = ep;
    if (uses_bias) {
      g.bias = dbias.data();
      g.bias_type = bias_type;
    }
    if (bgrad) g.bias_grad = static_cast<float*>(dbg.data());
    const GpuPathCounts before = gpu_path_counts();
    cuda::gemm(g);
    const GpuPathCounts paths = gpu_path_counts() - before;

    // Reference in double from the rounded inputs.
    auto opa = [&](int64_t i, int64_t k) { return double(ta ? a[k * lda + i] : a[i * lda + k]); };
    auto opb = [&](int64_t k, int64_t j) { return double(tb ? b[j * ldb + k] : b[k * ldb + j]); };
    std::vector<double> d_ref(M * N), bg_ref(M, 0.0);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += opa(i, k) * opb(k, j);
        double p = alpha * s + (beta != 0.0f ? beta * double(c0[i * ldc + j]) : 0.0);
        if (uses_bias) p += bias[j];
        d_ref[i * N + j] = p;
      }
    if (bgrad)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; ++k) bg_ref[i] += opa(i, k);

    const auto c_all = dc.download();
    std::vector<float> d_got(M * N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) d_got[i * N + j] = c_all[i * ldc + j];
    EXPECT_LE(norm_error(d_got, d_ref), tc.tol) << "D";
    // The padding between rows is never written.
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = N; j < ldc; ++j)
        if (beta == 0.0f) EXPECT_TRUE(std::isnan(c_all[i * ldc + j])) << "C padding " << i;
    if (bgrad) EXPECT_LE(norm_error(dbg.download(), bg_ref), 1e-4) << "bias_grad";

    // The path: one of them, per call; aligned calls with a product never run the naive kernel,
    // and misaligned vectors are never offered to cuBLASLt's epilogue.
    const bool product = M > 0 && N > 0 && K > 0;
    const int64_t counted = paths[GpuPath::GemmFused] + paths[GpuPath::GemmPlain] +
                            paths[GpuPath::GemmUnfused] + paths[GpuPath::GemmNaive];
    EXPECT_EQ(counted, product ? 1 : 0);
    if (product && !misaligned) EXPECT_EQ(paths[GpuPath::GemmNaive], 0);
    if (product && misaligned && ep != GemmEpilogue::None)
      EXPECT_EQ(paths[GpuPath::GemmFused], 0);
    if (product && ep == GemmEpilogue::None) EXPECT_EQ(paths[GpuPath::GemmFused], 0);
    // cuBLASLt fuses a bias of D's own type (its documented bias type) on every sm_80+ GPU.
    if (product && !misaligned && uses_bias && (ec.bias_of_c || tc.c == DType::F32))
      EXPECT_EQ(paths[GpuPath::GemmFused], 1) << "the bias epilogue fell back";
    cuda::set_gemm_tf32(false);
  }
};

TEST_P(GemmTest, EveryTypeAndEpilogueMatchesTheReference) {
  for (const TypeCase& tc : kTypes)
    for (const EpilogueCase& ec : kEpilogues)
      for (bool misaligned : {false, true}) {
        check(tc, ec, false, true, 64, 96, 72, 0.0f, misaligned);  // linear forward: x @ W^T
        check(tc, ec, true, false, 40, 24, 56, 1.0f, misaligned);  // dW += dout^T @ x
        check(tc, ec, false, false, 33, 17, 29, 0.0f, misaligned);  // odd sizes
        check(tc, ec, true, false, 33, 17, 29, 1.0f, misaligned);
      }
}

TEST_P(GemmTest, EmptyProductsAndZeroK) {
  const TypeCase& bf = kTypes[2];
  check(bf, {GemmEpilogue::Bias, true}, false, false, 8, 16, 0, 1.0f, false);  // D = beta C + b
  check(bf, {GemmEpilogue::BgradOpA, false}, true, false, 8, 16, 0, 0.0f, false);  // bgrad 0
  check(bf, {GemmEpilogue::BgradOpA, false}, true, false, 24, 0, 16, 0.0f, false);  // sums only
  check(bf, {GemmEpilogue::BgradOpA, false}, true, false, 0, 16, 24, 0.0f, false);
}

TEST_P(GemmTest, ALinearLayersBiasGradientAtModelShapes) {
  // BERT-base's dW += dout^T x with the bias gradient, 4096 tokens (more than one reduction chunk
  // when it falls back to the column reduction), bf16 operands and an fp32 dW.
  const TypeCase& bf = kTypes[3];
  check(bf, {GemmEpilogue::BgradOpA, false}, true, false, 768, 64, 4096, 1.0f, false);
  check(bf, {GemmEpilogue::BgradOpA, false}, true, false, 768, 64, 4096, 1.0f, true);
}

TEST_P(GemmTest, TheFp32OverloadForwards) {
  const int64_t M = 5, N = 7, K = 9;
  auto a = random_values(M * K, rng), b = random_values(K * N, rng), bias = random_values(N, rng);
  auto da = device_f32(a, {M, K}, device()), db = device_f32(b, {K, N}, device()),
       dbias = device_f32(bias, {N}, device());
  auto dc = poisoned({M, N}, device());
  cuda::gemm(false, false, M, N, K, 1.0f, da.view().data_as<float>(), K,
             db.view().data_as<float>(), N, 0.0f, dc.view().data_as<float>(), N,
             dbias.view().data_as<float>());
  const auto got = to_vector(dc.view());
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = bias[j];
      for (int64_t k = 0; k < K; ++k) s += double(a[i * K + k]) * b[k * N + j];
      EXPECT_NEAR(got[i * N + j], s, 1e-5);
    }
}

int count_in_summary(const std::string& summary, const std::string& what) {
  // "gemm autotune: 14 shapes timed, 3 from cache, 0 heuristic only"
  const size_t at = summary.find(what);
  if (at == std::string::npos) return -1;
  size_t start = summary.rfind(' ', at - 2);
  return std::atoi(summary.c_str() + (start == std::string::npos ? 0 : start + 1));
}

TEST_P(GemmTest, TimedShapesGoToTheCacheFileAndComeBackFromIt) {
  const std::string path = cuda::gemm_cache_path();
  if (path.empty()) GTEST_SKIP() << "FTUNE_GEMM_CACHE is empty: no cache file";
  cuda::set_gemm_autotune(true);
  const TypeCase& bf = kTypes[2];
  // A shape no other test uses (M = 200): its first call is timed.
  const std::string before = cuda::gemm_autotune_summary();
  check(bf, {GemmEpilogue::None, false}, false, true, 200, 128, 96, 0.0f, false);
  const std::string after = cuda::gemm_autotune_summary();
  cuda::gemm_autotune_save();  // timed shapes reach the file when saved, not one by one
  EXPECT_EQ(count_in_summary(after, "shapes timed"), count_in_summary(before, "shapes timed") + 1)
      << before << " / " << after;
  const auto j = io::read_json_file(path);
  bool found = false;
  for (const auto& e : j["entries"])
    // The file's key holds the size buckets (gemm_algo_cache.h): M = 200 is stored as 224.
    found = found || (e["key"]["M"] == cuda::gemm_size_bucket(200) &&
                      e["key"]["N"] == cuda::gemm_size_bucket(128) &&
                      e["key"]["K"] == cuda::gemm_size_bucket(96) &&
                      e["key"]["a_type"] == "bf16");
  EXPECT_TRUE(found) << path;

  // Forget the in-memory choices: the next call takes the algorithm from the cache (re-validated).
  cuda::set_gemm_autotune(true);
  check(bf, {GemmEpilogue::None, false}, false, true, 200, 128, 96, 0.0f, false);
  const std::string again = cuda::gemm_autotune_summary();
  EXPECT_EQ(count_in_summary(again, "from cache"), count_in_summary(after, "from cache") + 1)
      << after << " / " << again;

  // Autotune off: the heuristic's first choice, still correct.
  cuda::set_gemm_autotune(false);
  check(bf, {GemmEpilogue::Bias, true}, false, true, 200, 128, 96, 0.0f, false);
  EXPECT_GT(count_in_summary(cuda::gemm_autotune_summary(), "heuristic only"), 0);
  cuda::set_gemm_autotune(true);
}

TEST_P(GemmTest, UnsupportedTypesThrowDeviceErrorBeforeTouchingTheDevice) {
  cuda::GemmArgs g;
  g.M = g.N = g.K = 4;
  g.a_type = DType::BF16;
  g.b_type = DType::F16;
  g.lda = g.ldb = g.ldc = 4;
  EXPECT_THROW(cuda::gemm(g), DeviceError);
}

FTUNE_INSTANTIATE_DEVICES(GemmTest);

}  // namespace
}  // namespace ftune::test
#endif  // FTUNE_WITH_CUDA
