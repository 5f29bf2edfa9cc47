// The norm layer block (models/layers/norm.h) on the CPU against its ops called by hand:
// LayerNorm and RMSNorm (with an offset), into an fp32 output and, with fp32 staging, into a bf16
// one (rounded once from the staged fp32 result), and their backward with the weight's (and
// bias's) gradients accumulated; a frozen norm leaves its gradients alone.
#include <gtest/gtest.h>

#include <random>

#include "models/layers/norm.h"
#include "ops/cast.h"
#include "ops/layer_norm.h"
#include "ops/op_test_util.h"
#include "ops/rms_norm.h"

// A named namespace: the test files of a group compile as one unit (tests/CMakeLists.txt).
namespace ftune::test::norm_block {

constexpr int64_t N = 5, C = 8;

std::vector<float> vec(const HostTensor& t) {
  return to_vector(t.view());
}

void run(bool rms, bool staged) {
  SCOPED_TRACE(::testing::Message() << "rms " << rms << " staged " << staged);
  std::mt19937_64 rng(rms * 2 + staged + 3);
  HostTensor x = random_tensor({N, C}, rng), w = random_tensor({C}, rng), b = random_tensor({C}, rng),
             dy = random_tensor({N, C}, rng);
  HostTensor gw = tensor_from(std::vector<float>(C, 1.0f), {C}), gb = tensor_from(std::vector<float>(C, 1.0f), {C});
  HostTensor rgw = tensor_from(std::vector<float>(C, 1.0f), {C}), rgb = tensor_from(std::vector<float>(C, 1.0f), {C});
  const int64_t ws = rms_norm_backward_workspace(Device::cpu(), C);
  HostTensor work = poisoned_tensor({std::max<int64_t>(ws, 1)});
  const Norm norm = rms ? Norm::rms(w.view(), gw.view(), 1e-6f, 1.0f, work.view())
                        : Norm::layer(w.view(), b.view(), gw.view(), gb.view(), 1e-5f);
  const DType out_type = staged ? DType::BF16 : DType::F32;
  DeviceTensor out = zeros({N, C}, Device::cpu(), out_type), ref = zeros({N, C}, Device::cpu(), out_type);
  HostTensor stage = poisoned_tensor({N * C}), rstage = poisoned_tensor({N, C});
  HostTensor mean = poisoned_tensor({N}), rstd = poisoned_tensor({N}), rmean = poisoned_tensor({N}),
             rrstd = poisoned_tensor({N});
  norm.forward(out.view(), mean.view(), rstd.view(), x.view(), staged ? stage.view() : TensorView());
  const TensorView y = staged ? rstage.view() : ref.view();
  if (rms) {
    rms_norm_forward(y, rrstd.view(), x.view(), w.view(), 1e-6f, 1.0f);
    if (staged) cast(ref.view(), y);
  } else {
    layer_norm_forward(y, rmean.view(), rrstd.view(), x.view(), w.view(), b.view(), 1e-5f,
                       staged ? ref.view() : TensorView());
  }
  HostTensor out32 = poisoned_tensor({N, C}), ref32 = poisoned_tensor({N, C});
  cast(out32.view(), out.view());
  cast(ref32.view(), ref.view());
  EXPECT_EQ(vec(out32), vec(ref32));
  EXPECT_EQ(vec(rstd), vec(rrstd));

  HostTensor dx = poisoned_tensor({N, C}), rdx = poisoned_tensor({N, C});
  norm.backward(dx.view(), dy.view(), x.view(), mean.view(), rstd.view());
  if (rms)
    rms_norm_backward(rdx.view(), rgw.view(), dy.view(), x.view(), w.view(), rrstd.view(), 1.0f,
                      work.view());
  else
    layer_norm_backward(rdx.view(), rgw.view(), rgb.view(), dy.view(), x.view(), w.view(),
                        rmean.view(), rrstd.view());
  EXPECT_EQ(vec(dx), vec(rdx));
  EXPECT_EQ(vec(gw), vec(rgw));
  EXPECT_EQ(vec(gb), vec(rgb));
  EXPECT_NE(vec(gw), std::vector<float>(C, 1.0f));  // accumulated onto 1
}

TEST(NormBlock, LayerNormMatchesItsOps) {
  run(false, false);
  run(false, true);
}

TEST(NormBlock, RmsNormMatchesItsOps) {
  run(true, false);
  run(true, true);
}

TEST(NormBlock, AFrozenNormWritesOnlyTheInputGradient) {
  std::mt19937_64 rng(9);
  HostTensor x = random_tensor({N, C}, rng), w = random_tensor({C}, rng), b = random_tensor({C}, rng),
             dy = random_tensor({N, C}, rng);
  const Norm norm = Norm::layer(w.view(), b.view(), TensorView(), TensorView(), 1e-5f);
  HostTensor y = poisoned_tensor({N, C}), mean = poisoned_tensor({N}), rstd = poisoned_tensor({N}),
             dx = poisoned_tensor({N, C});
  norm.forward(y.view(), mean.view(), rstd.view(), x.view());
  norm.backward(dx.view(), dy.view(), x.view(), mean.view(), rstd.view());
  for (float v : vec(dx)) EXPECT_TRUE(std::isfinite(v));
}

}  // namespace ftune::test::norm_block
