// Host-side checks of cuBLASLt GEMM calls (cuda::check_gemm_args): supported type combinations,
// leading dimensions, pointers the epilogue needs or ignores, alignment. Plain C++: runs on every
// machine, with or without CUDA.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/error.h"
#include "cuda/gemm.h"

namespace ftune::cuda {
namespace {

// Fake device addresses: the checks never dereference them.
void* addr(uintptr_t a) {
  return reinterpret_cast<void*>(a);
}

// A valid row-major call: A (M, K), B (K, N), C (M, N), all of type t (C of type c).
GemmArgs valid(DType t = DType::BF16, DType c = DType::BF16) {
  GemmArgs g;
  g.M = 6;
  g.N = 8;
  g.K = 16;
  g.A = addr(0x10000);
  g.a_type = t;
  g.lda = 16;
  g.B = addr(0x20000);
  g.b_type = t;
  g.ldb = 8;
  g.C = addr(0x30000);
  g.c_type = c;
  g.ldc = 8;
  return g;
}

template <typename E>
std::string error_of(const GemmArgs& g) {
  try {
    check_gemm_args(g);
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GemmArgs, AcceptsTheSupportedTypeCombinations) {
  EXPECT_NO_THROW(check_gemm_args(valid(DType::F32, DType::F32)));
  EXPECT_NO_THROW(check_gemm_args(valid(DType::BF16, DType::BF16)));
  EXPECT_NO_THROW(check_gemm_args(valid(DType::BF16, DType::F32)));
  EXPECT_NO_THROW(check_gemm_args(valid(DType::F16, DType::F16)));
  EXPECT_NO_THROW(check_gemm_args(valid(DType::F16, DType::F32)));
}

TEST(GemmArgs, RejectsOtherTypeCombinationsWithDeviceErrorNamingShapeAndTypes) {
  GemmArgs g = valid(DType::BF16, DType::BF16);
  g.b_type = DType::F32;
  const std::string msg = error_of<DeviceError>(g);
  EXPECT_NE(msg.find("unsupported type combination"), std::string::npos) << msg;
  EXPECT_NE(msg.find("M=6, N=8, K=16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("A bf16 N, B f32 N, C bf16"), std::string::npos) << msg;

  EXPECT_NE(error_of<DeviceError>(valid(DType::BF16, DType::F16)).find("unsupported"),
            std::string::npos);
  EXPECT_NE(error_of<DeviceError>(valid(DType::F32, DType::BF16)).find("unsupported"),
            std::string::npos);
  EXPECT_NE(error_of<DeviceError>(valid(DType::I32, DType::I32)).find("unsupported"),
            std::string::npos);
}

TEST(GemmArgs, LeadingDimensionsMustCoverTheStoredRows) {
  GemmArgs g = valid();
  g.lda = 15;
  EXPECT_NE(error_of<ShapeError>(g).find("lda = 15 is less than K = 16, the row length of A "
                                         "stored (M, K)"),
            std::string::npos)
      << error_of<ShapeError>(g);
  g = valid();
  g.trans_a = true;  // A stored (K, M): rows of M = 6 elements
  g.lda = 6;
  EXPECT_NO_THROW(check_gemm_args(g));
  g.lda = 5;
  EXPECT_NE(error_of<ShapeError>(g).find("lda = 5 is less than M = 6"), std::string::npos);
  g = valid();
  g.trans_b = true;  // B stored (N, K)
  g.ldb = 8;
  EXPECT_NE(error_of<ShapeError>(g).find("ldb = 8 is less than K = 16"), std::string::npos);
  g = valid();
  g.ldc = 7;
  EXPECT_NE(error_of<ShapeError>(g).find("ldc = 7 is less than N = 8"), std::string::npos);
  g = valid();
  g.M = -1;
  EXPECT_NE(error_of<ShapeError>(g).find("negative size"), std::string::npos);
}

TEST(GemmArgs, PointersMustBeAlignedToTheirElementSize) {
  GemmArgs g = valid(DType::BF16, DType::F32);
  g.A = addr(0x10001);  // odd address for a bf16 matrix
  std::string msg = error_of<ShapeError>(g);
  EXPECT_NE(msg.find("A = 0x10001 is not aligned to its element size (2 bytes, bf16)"),
            std::string::npos)
      << msg;
  g = valid(DType::BF16, DType::F32);
  g.C = addr(0x30002);  // f32 C at 2 bytes past 4-byte alignment
  msg = error_of<ShapeError>(g);
  EXPECT_NE(msg.find("C = 0x30002 is not aligned"), std::string::npos) << msg;
  g = valid(DType::BF16, DType::BF16);
  g.C = addr(0x30002);  // fine for bf16
  EXPECT_NO_THROW(check_gemm_args(g));
}

TEST(GemmArgs, NullMatricesOnlyForEmptyProducts) {
  GemmArgs g = valid();
  g.A = nullptr;
  EXPECT_NE(error_of<ShapeError>(g).find("A is null"), std::string::npos);
  g.K = 0;  // C = beta C: A and B are not read
  g.B = nullptr;
  EXPECT_NO_THROW(check_gemm_args(g));
  g.C = nullptr;
  EXPECT_NE(error_of<ShapeError>(g).find("C is null"), std::string::npos);
  g.M = 0;  // nothing to compute at all
  EXPECT_NO_THROW(check_gemm_args(g));
}

TEST(GemmArgs, BiasAndBiasGradientArePresentExactlyWhereTheEpilogueUsesThem) {
  GemmArgs g = valid();
  g.epilogue = GemmEpilogue::Bias;
  EXPECT_NE(error_of<ShapeError>(g).find("bias is null"), std::string::npos);
  g.bias = addr(0x40002);  // not 4-byte aligned
  EXPECT_NE(error_of<ShapeError>(g).find("bias = 0x40002 is not aligned"), std::string::npos);
  g.bias = addr(0x40004);  // 4-byte aligned: fine (unfused if not 16)
  EXPECT_NO_THROW(check_gemm_args(g));
  g.epilogue = GemmEpilogue::None;
  EXPECT_NE(error_of<ShapeError>(g).find("bias is set but epilogue none does not add a bias"),
            std::string::npos);

  g = valid();
  g.trans_a = true;
  g.lda = 6;  // A stored (K, M)
  g.epilogue = GemmEpilogue::BgradOpA;
  EXPECT_NE(error_of<ShapeError>(g).find("bias_grad is null"), std::string::npos);
  g.bias_grad = static_cast<float*>(addr(0x50000));
  EXPECT_NO_THROW(check_gemm_args(g));
  g.epilogue = GemmEpilogue::Bias;
  g.bias = addr(0x40000);
  EXPECT_NE(error_of<ShapeError>(g).find("bias_grad is set but epilogue bias does not write it"),
            std::string::npos);

  // BgradOpA's gradient has M entries: with M = 0 it may be null even though N > 0.
  g = valid();
  g.trans_a = true;
  g.lda = 6;
  g.epilogue = GemmEpilogue::BgradOpA;
  g.M = 0;
  EXPECT_NO_THROW(check_gemm_args(g));
}

TEST(GemmArgs, TheBiasIsF32OrOfCsSixteenBitType) {
  GemmArgs g = valid(DType::BF16, DType::BF16);
  g.epilogue = GemmEpilogue::Bias;
  g.bias = addr(0x40000);
  g.bias_type = DType::BF16;
  EXPECT_NO_THROW(check_gemm_args(g));
  g.bias_type = DType::F32;
  EXPECT_NO_THROW(check_gemm_args(g));
  g.bias_type = DType::F16;  // not C's type
  EXPECT_NE(error_of<ShapeError>(g).find("bias of type f16"), std::string::npos);
  g = valid(DType::BF16, DType::F32);  // an fp32 C takes an fp32 bias only
  g.epilogue = GemmEpilogue::Bias;
  g.bias = addr(0x40000);
  g.bias_type = DType::BF16;
  EXPECT_NE(error_of<ShapeError>(g).find("bias of type bf16"), std::string::npos);
  g = valid(DType::BF16, DType::BF16);  // a 16-bit bias is 2-byte aligned
  g.epilogue = GemmEpilogue::Bias;
  g.bias_type = DType::BF16;
  g.bias = addr(0x40002);
  EXPECT_NO_THROW(check_gemm_args(g));
}

TEST(GemmArgs, TheBiasGradientEpilogueNeedsATransposedA) {
  GemmArgs g = valid(DType::BF16, DType::F32);
  g.epilogue = GemmEpilogue::BgradOpA;
  g.bias_grad = static_cast<float*>(addr(0x50000));
  EXPECT_NE(error_of<ShapeError>(g).find("needs A stored transposed"), std::string::npos);
}

TEST(GemmArgs, DescriptionNamesShapeTransposesTypesAndEpilogue) {
  GemmArgs g = valid(DType::BF16, DType::F32);
  g.trans_b = true;
  g.epilogue = GemmEpilogue::BgradOpA;
  EXPECT_EQ(describe_gemm(g),
            "gemm (M=6, N=8, K=16, A bf16 N, B bf16 T, C f32, epilogue bgrad_op_a)");
  EXPECT_EQ(gemm_epilogue_name(GemmEpilogue::Bias), "bias");
}

}  // namespace
}  // namespace ftune::cuda
