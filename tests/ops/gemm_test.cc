// cuBLASLt GEMMs (cuda/gemm.h) against a CPU reference computed in double from the inputs as the
// device sees them (rounded to bf16 / f16 first): every supported type combination, every
// epilogue, fused (aligned bias / aux) and unfused (misaligned) paths, transposes, beta = 0 on
// NaN-poisoned outputs and beta = 1 on random C (which also shows that timing the candidates of a
// new shape never touches the caller's buffers), and the algorithm cache: a timed shape is written
// to the cache file and taken from it again. cuBLASLt is CUDA only: the CPU parameter is skipped.
#include "cuda/gemm.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

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

double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double gelu_tanh_grad(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  const double t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

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

const GemmEpilogue kEpilogues[] = {
    cuda::GemmEpilogue::None,     cuda::GemmEpilogue::Bias,       cuda::GemmEpilogue::GeluBias,
    cuda::GemmEpilogue::DGelu,    cuda::GemmEpilogue::DGeluBgrad, cuda::GemmEpilogue::Bgrad,
    cuda::GemmEpilogue::BgradOpA,
};

class GemmTest : public OpTest {
 protected:
  void SetUp() override {
    if (device().kind != DeviceKind::CUDA) GTEST_SKIP() << "cuBLASLt GEMMs are CUDA only";
  }

  // One call against the reference. `misaligned` puts bias / bias_grad 4 bytes off 16-byte
  // alignment and gives aux (and A, B, C) leading dimensions that are not multiples of 8: the
  // unfused path. Otherwise every leading dimension is a multiple of 8 where the sizes are, and
  // cuBLASLt's fused epilogue runs where it supports the combination.
  void check(const TypeCase& tc, GemmEpilogue ep, bool ta, bool tb, int64_t M, int64_t N,
             int64_t K, float beta, bool misaligned) {
    SCOPED_TRACE(::testing::Message()
                 << tc.name << " epilogue " << cuda::gemm_epilogue_name(ep) << " ta " << ta
                 << " tb " << tb << " M " << M << " N " << N << " K " << K << " beta " << beta
                 << (misaligned ? " misaligned" : " aligned") << " seed " << test_seed());
    cuda::set_gemm_tf32(tc.tf32);
    const float alpha = 0.75f;
    // Padded rows: multiples of 8 elements where the sizes are (the fused path), odd otherwise.
    const int64_t pad = misaligned ? 1 : 8;
    const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + (misaligned ? 3 : 8),
                  ldc = N + pad;
    const int64_t ldaux = misaligned ? N + 1 : ((N + 7) / 8) * 8 + 8;
    const int64_t a_rows = ta ? K : M, b_rows = tb ? N : K;
    const int64_t off = misaligned ? 1 : 0;
    const bool uses_bias = ep == GemmEpilogue::Bias || ep == GemmEpilogue::GeluBias;
    const bool uses_aux = ep == GemmEpilogue::GeluBias || ep == GemmEpilogue::DGelu ||
                          ep == GemmEpilogue::DGeluBgrad;
    const bool bgrad = ep == GemmEpilogue::DGeluBgrad || ep == GemmEpilogue::Bgrad ||
                       ep == GemmEpilogue::BgradOpA;
    const int64_t nbg = ep == GemmEpilogue::BgradOpA ? M : N;

    auto a = random_values(a_rows * lda, rng), b = random_values(b_rows * ldb, rng);
    auto c0 = beta != 0.0f ? random_values(M * ldc, rng)
                           : std::vector<float>(M * ldc, std::nanf(""));
    auto bias = random_values(N, rng);
    auto aux0 = ep == GemmEpilogue::GeluBias ? std::vector<float>(M * ldaux, std::nanf(""))
                                             : random_values(M * ldaux, rng, -3.0f, 3.0f);
    std::vector<float> bg0(nbg, std::nanf(""));
    Buffer da(device(), tc.ab, a_rows * lda), db(device(), tc.ab, b_rows * ldb),
        dc(device(), tc.c, M * ldc), dbias(device(), DType::F32, N, off),
        daux(device(), tc.c, M * ldaux), dbg(device(), DType::F32, nbg, off);
    da.upload(a);
    db.upload(b);
    dc.upload(c0);
    dbias.upload(bias);
    daux.upload(aux0);
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
    if (uses_bias) g.bias = static_cast<const float*>(dbias.data());
    if (uses_aux) {
      g.aux = daux.data();
      g.ldaux = ldaux;
    }
    if (bgrad) g.bias_grad = static_cast<float*>(dbg.data());
    cuda::gemm(g);

    // Reference in double from the rounded inputs.
    auto opa = [&](int64_t i, int64_t k) { return double(ta ? a[k * lda + i] : a[i * lda + k]); };
    auto opb = [&](int64_t k, int64_t j) { return double(tb ? b[j * ldb + k] : b[k * ldb + j]); };
    std::vector<double> d_ref(M * N), aux_ref(M * N), bg_ref(nbg, 0.0);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += opa(i, k) * opb(k, j);
        double p = alpha * s + (beta != 0.0f ? beta * double(c0[i * ldc + j]) : 0.0);
        if (uses_bias) p += bias[j];
        if (ep == GemmEpilogue::GeluBias) {
          aux_ref[i * N + j] = p;
          p = gelu_tanh(p);
        }
        if (ep == GemmEpilogue::DGelu || ep == GemmEpilogue::DGeluBgrad)
          p *= gelu_tanh_grad(aux0[i * ldaux + j]);
        d_ref[i * N + j] = p;
      }
    if (ep == GemmEpilogue::DGeluBgrad)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) bg_ref[j] += d_ref[i * N + j];
    if (ep == GemmEpilogue::Bgrad)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < N; ++j) bg_ref[j] += opb(k, j);
    if (ep == GemmEpilogue::BgradOpA)
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
    if (ep == GemmEpilogue::GeluBias) {
      const auto aux_all = daux.download();
      std::vector<float> aux_got(M * N);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) aux_got[i * N + j] = aux_all[i * ldaux + j];
      EXPECT_LE(norm_error(aux_got, aux_ref), tc.tol) << "aux";
    }
    if (bgrad) {
      // A 16-bit D may be summed before or after its rounding: bf16's tolerance either way.
      EXPECT_LE(norm_error(dbg.download(), bg_ref), std::max(tc.tol, 1e-4)) << "bias_grad";
    }
    cuda::set_gemm_tf32(false);
  }
};

TEST_P(GemmTest, EveryTypeAndEpilogueMatchesTheReference) {
  for (const TypeCase& tc : kTypes)
    for (GemmEpilogue ep : kEpilogues)
      for (bool misaligned : {false, true}) {
        check(tc, ep, false, true, 64, 96, 72, 0.0f, misaligned);  // linear forward: x @ W^T
        check(tc, ep, true, false, 40, 24, 56, 1.0f, misaligned);  // dW += dout^T @ x
        check(tc, ep, false, false, 33, 17, 29, 0.0f, misaligned);  // odd sizes
      }
}

TEST_P(GemmTest, EmptyProductsAndZeroK) {
  const TypeCase& bf = kTypes[2];
  check(bf, cuda::GemmEpilogue::Bias, false, false, 8, 16, 0, 1.0f, false);  // D = beta C + bias
  check(bf, cuda::GemmEpilogue::DGeluBgrad, false, false, 8, 16, 0, 0.0f, false);
  check(bf, cuda::GemmEpilogue::Bgrad, false, true, 0, 16, 24, 0.0f, false);  // no rows, sums of B
  check(bf, cuda::GemmEpilogue::BgradOpA, true, false, 24, 0, 16, 0.0f, false);
}

TEST_P(GemmTest, InPlaceGeluBackwardOverwritesItsAux) {
  // D = (dout @ W) * gelu'(pre) written over pre itself (C == aux): the first call of the shape is
  // timed, and the timing runs must not change pre before the real call reads it.
  const int64_t M = 48, N = 64, K = 32;
  for (const TypeCase& tc : {kTypes[0], kTypes[2]}) {
    SCOPED_TRACE(tc.name);
    auto a = random_values(M * K, rng), b = random_values(K * N, rng),
         pre = random_values(M * N, rng, -3.0f, 3.0f);
    Buffer da(device(), tc.ab, M * K), db(device(), tc.ab, K * N), dpre(device(), tc.c, M * N);
    da.upload(a);
    db.upload(b);
    dpre.upload(pre);
    cuda::GemmArgs g;
    g.M = M, g.N = N, g.K = K;
    g.A = da.data(), g.a_type = tc.ab, g.lda = K;
    g.B = db.data(), g.b_type = tc.ab, g.ldb = N;
    g.C = dpre.data(), g.c_type = tc.c, g.ldc = N;
    g.epilogue = GemmEpilogue::DGelu;
    g.aux = dpre.data(), g.ldaux = N;
    cuda::gemm(g);
    std::vector<double> ref(M * N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += double(a[i * K + k]) * b[k * N + j];
        ref[i * N + j] = s * gelu_tanh_grad(pre[i * N + j]);
      }
    EXPECT_LE(norm_error(dpre.download(), ref), tc.tol);
  }
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
  check(bf, cuda::GemmEpilogue::None, false, true, 200, 128, 96, 0.0f, false);
  const std::string after = cuda::gemm_autotune_summary();
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
  check(bf, cuda::GemmEpilogue::None, false, true, 200, 128, 96, 0.0f, false);
  const std::string again = cuda::gemm_autotune_summary();
  EXPECT_EQ(count_in_summary(again, "from cache"), count_in_summary(after, "from cache") + 1)
      << after << " / " << again;

  // Autotune off: the heuristic's first choice, still correct.
  cuda::set_gemm_autotune(false);
  check(bf, cuda::GemmEpilogue::GeluBias, false, true, 200, 128, 96, 0.0f, false);
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
