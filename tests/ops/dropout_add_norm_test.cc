// The fused dropout + residual + layer norm (ops/dropout_add_norm.h) against its composition
// (dropout_forward, residual_forward, layer_norm_forward; layer_norm_backward, dropout_backward),
// bit for bit, on every device: f32, bf16 and f16 sublayer outputs, with and without dropout and
// the 16-bit output copy, rows placed in a step batch (row0, a longer stream sequence), masks keyed
// through MicroParams in device memory (as a replayed CUDA graph reads them), odd widths (no
// vector path, no whole Philox groups) and BERT-base's 2,048 x 768. The sublayer output itself
// is left as it was.
#include "ops/dropout_add_norm.h"

#include <cstring>

#include "core/memory.h"
#include "op_test_util.h"
#include "ops/cast.h"
#include "ops/layer_norm.h"
#include "ops/residual.h"

namespace ftune::test {
namespace {

class DropoutAddNormTest : public OpTest {
 protected:
  DeviceTensor make(const std::vector<float>& v, Shape s, DType t) {
    DeviceTensor f = device_f32(v, s, device());
    if (t == DType::F32) return f;
    DeviceTensor h(device(), t, s);
    cast(h.view(), f.view());
    return h;
  }
  DeviceTensor poisoned_as(Shape s, DType t) {
    DeviceTensor p = poisoned(s, device());
    if (t == DType::F32) return p;
    DeviceTensor h(device(), t, s);
    cast(h.view(), p.view());
    return h;
  }
  // The raw bytes of any tensor (bit-for-bit comparisons of 16-bit tensors too).
  std::string bytes(TensorView v) {
    HostTensor h(v.dtype, v.shape);
    copy(h.view(), v);
    return std::string(static_cast<const char*>(h.view().data),
                       static_cast<size_t>(v.numel()) * dtype_size(v.dtype));
  }

  struct Case {
    int64_t B, T, C;
    DType a_type;
    DType h_type;  // the 16-bit copy of out and the type of ddrop; F32: no copy, f32 ddrop
    float p;
    uint64_t row0 = 0;
    int64_t stream_seq = 0;
    bool micro = false;  // the key's offset and row0 read from MicroParams on the device
  };

  void check(const Case& k) {
    SCOPED_TRACE(::testing::Message()
                 << "B " << k.B << " T " << k.T << " C " << k.C << " a " << dtype_name(k.a_type)
                 << " h " << dtype_name(k.h_type) << " p " << k.p << " row0 " << k.row0
                 << " stream_seq " << k.stream_seq << (k.micro ? " micro" : "") << " seed "
                 << test_seed());
    const int64_t N = k.B * k.T, C = k.C;
    const Shape NC{N, C};
    const auto av = random_values(N * C, rng, -2, 2), bv = random_values(N * C, rng, -2, 2),
               wv = random_values(C, rng), biasv = random_values(C, rng),
               dyv = random_values(N * C, rng);
    auto a = make(av, NC, k.a_type), b = device_f32(bv, NC, device());
    auto w = device_f32(wv, {C}, device()), bias = device_f32(biasv, {C}, device());
    RngKey key{0x5eedull, 17, 3};
    MicroParams host_micro;
    host_micro.row0 = k.row0;
    host_micro.offset = 9;
    DeviceTensor micro(device(), DType::I32, Shape{static_cast<int64_t>(sizeof(MicroParams) / 4)});
    {
      HostTensor h(DType::I32, micro.view().shape);
      std::memcpy(h.view().data, &host_micro, sizeof host_micro);
      copy(micro.view(), h.view());
    }
    DropoutRows rows{k.row0, k.T, k.stream_seq};
    if (k.micro) {
      key.micro = static_cast<const MicroParams*>(micro.view().data);
      rows.row0 = 0;  // read from MicroParams
    }
    const bool copy16 = k.h_type != DType::F32;

    // Composition.
    auto a_dropped = make(av, NC, k.a_type);
    dropout_forward(a_dropped.view(), a_dropped.view(), k.p, key, rows);
    auto sum_ref = poisoned(NC, device()), out_ref = poisoned(NC, device()),
         mean_ref = poisoned({N}, device()), rstd_ref = poisoned({N}, device());
    auto h_ref = copy16 ? poisoned_as(NC, k.h_type) : poisoned(NC, device());
    residual_forward(sum_ref.view(), a_dropped.view(), b.view());
    layer_norm_forward(out_ref.view(), mean_ref.view(), rstd_ref.view(), sum_ref.view(), w.view(),
                       bias.view(), 1e-12f, copy16 ? h_ref.view() : TensorView());
    // Fused.
    auto sum = poisoned(NC, device()), out = poisoned(NC, device()),
         mean = poisoned({N}, device()), rstd = poisoned({N}, device());
    auto h = copy16 ? poisoned_as(NC, k.h_type) : poisoned(NC, device());
    const std::string a_before = bytes(a.view());
    dropout_add_layer_norm_forward(out.view(), copy16 ? h.view() : TensorView(), sum.view(),
                                   mean.view(), rstd.view(), a.view(), b.view(), w.view(),
                                   bias.view(), 1e-12f, k.p, key, rows);
    EXPECT_EQ(bytes(sum.view()), bytes(sum_ref.view())) << "sum";
    EXPECT_EQ(bytes(out.view()), bytes(out_ref.view())) << "out";
    EXPECT_EQ(bytes(mean.view()), bytes(mean_ref.view())) << "mean";
    EXPECT_EQ(bytes(rstd.view()), bytes(rstd_ref.view())) << "rstd";
    if (copy16) EXPECT_EQ(bytes(h.view()), bytes(h_ref.view())) << "out_h";
    EXPECT_EQ(bytes(a.view()), a_before) << "a is not modified";
    if (k.p > 0) EXPECT_NE(bytes(sum.view()), residual_sum(a, b)) << "no dropout applied";

    // Backward: composition, then fused (parameter gradients accumulate onto the same start).
    const auto gw0 = random_values(C, rng), gb0 = random_values(C, rng);
    auto dy = device_f32(dyv, NC, device());
    auto dinp_ref = poisoned(NC, device()), ddrop_ref = poisoned_as(NC, k.h_type);
    auto gw_ref = device_f32(gw0, {C}, device()), gb_ref = device_f32(gb0, {C}, device());
    layer_norm_backward(dinp_ref.view(), gw_ref.view(), gb_ref.view(), dy.view(), sum_ref.view(),
                        w.view(), mean_ref.view(), rstd_ref.view());
    dropout_backward(ddrop_ref.view(), dinp_ref.view(), k.p, key, rows);
    auto dinp = poisoned(NC, device()), ddrop = poisoned_as(NC, k.h_type);
    auto gw = device_f32(gw0, {C}, device()), gb = device_f32(gb0, {C}, device());
    layer_norm_dropout_backward(dinp.view(), ddrop.view(), gw.view(), gb.view(), dy.view(),
                                sum.view(), w.view(), mean.view(), rstd.view(), k.p, key, rows);
    EXPECT_EQ(bytes(dinp.view()), bytes(dinp_ref.view())) << "dinp";
    EXPECT_EQ(bytes(ddrop.view()), bytes(ddrop_ref.view())) << "ddrop";
    EXPECT_EQ(bytes(gw.view()), bytes(gw_ref.view())) << "dweight";
    EXPECT_EQ(bytes(gb.view()), bytes(gb_ref.view())) << "dbias";
    // A frozen LayerNorm: only the input gradients.
    auto dinp2 = poisoned(NC, device()), ddrop2 = poisoned_as(NC, k.h_type);
    layer_norm_dropout_backward(dinp2.view(), ddrop2.view(), TensorView(), TensorView(), dy.view(),
                                sum.view(), w.view(), mean.view(), rstd.view(), k.p, key, rows);
    EXPECT_EQ(bytes(ddrop2.view()), bytes(ddrop_ref.view())) << "ddrop (frozen)";
  }

  std::string residual_sum(const DeviceTensor& a, const DeviceTensor& b) {
    auto s = poisoned(b.view().shape, device());
    residual_forward(s.view(), a.view(), b.view());
    return bytes(s.view());
  }
};

TEST_P(DropoutAddNormTest, GivesTheCompositionsBits) {
  for (DType a_type : {DType::F32, DType::BF16, DType::F16})
    for (float p : {0.0f, 0.3f}) {
      const DType h = a_type == DType::F32 ? DType::F32 : a_type;
      check({3, 5, 64, a_type, h, p});
      check({2, 7, 37, a_type, h, p});  // odd width: scalar path, Philox groups across elements
      check({2, 4, 24, a_type, h, p, /*row0=*/5, /*stream_seq=*/9});
      check({2, 4, 24, a_type, h, p, /*row0=*/6, /*stream_seq=*/8, /*micro=*/true});
    }
  check({2, 3, 40, DType::F32, DType::BF16, 0.2f});  // f32 sublayer, bf16 copy and gradient
}

TEST_P(DropoutAddNormTest, GivesTheCompositionsBitsAtBertBaseShape) {
  check({16, 128, 768, DType::BF16, DType::BF16, 0.1f, /*row0=*/16, /*stream_seq=*/160});
  check({16, 128, 768, DType::F32, DType::F32, 0.1f});
}

TEST(DropoutAddNormErrors, ArgumentsAreChecked) {
  const Shape NC{4, 8};
  auto f = zeros(NC, Device::cpu()), s = zeros(NC, Device::cpu()), o = zeros(NC, Device::cpu());
  auto m = zeros({4}, Device::cpu()), r = zeros({4}, Device::cpu());
  auto w = zeros({8}, Device::cpu()), bias = zeros({8}, Device::cpu());
  const DropoutRows rows{0, 2, 0};
  EXPECT_THROW(dropout_add_layer_norm_forward(o.view(), TensorView(), s.view(), m.view(), r.view(),
                                              f.view(), f.view(), w.view(), bias.view(), 1e-5f,
                                              1.0f, RngKey{}, rows),
               ShapeError);  // p = 1
  auto wrong = zeros({8}, Device::cpu());
  EXPECT_THROW(dropout_add_layer_norm_forward(o.view(), TensorView(), s.view(), m.view(), r.view(),
                                              f.view(), f.view(), wrong.view(), wrong.view(),
                                              1e-5f, 0.1f, RngKey{}, DropoutRows{0, 3, 0}),
               ShapeError);  // 4 rows are not whole sequences of 3
  EXPECT_THROW(layer_norm_dropout_backward(o.view(), o.view(), TensorView(), TensorView(),
                                           f.view(), s.view(), w.view(), m.view(), r.view(), 0.1f,
                                           RngKey{}, rows),
               ShapeError);  // ddrop aliases dinp
}

FTUNE_INSTANTIATE_DEVICES(DropoutAddNormTest);

}  // namespace
}  // namespace ftune::test
