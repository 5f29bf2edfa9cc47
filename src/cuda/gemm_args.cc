// Host-side checks and descriptions of cuBLASLt GEMM calls (cuda/gemm.h). Plain C++, built with
// and without CUDA, so the checks are tested on any machine.
#include <fmt/format.h>

#include <cstdint>

#include "core/error.h"
#include "cuda/gemm.h"

namespace ftune::cuda {
namespace {

bool is_16bit_float(DType t) {
  return t == DType::BF16 || t == DType::F16;
}

bool supported_types(DType a, DType b, DType c) {
  if (a != b) return false;
  if (a == DType::F32) return c == DType::F32;
  if (is_16bit_float(a)) return c == DType::F32 || c == a;
  return false;
}

// Row-major storage: each of the `rows` rows holds `cols` elements, ld apart.
void check_ld(const GemmArgs& g, const char* name, int64_t ld, int64_t rows, int64_t cols,
              const char* cols_name, const char* stored) {
  if (rows > 0 && cols > 0 && ld < cols)
    throw ShapeError(fmt::format("{}: {} = {} is less than {} = {}, the row length of {}",
                                 describe_gemm(g), name, ld, cols_name, cols, stored));
  if (ld < 0) throw ShapeError(fmt::format("{}: {} = {} is negative", describe_gemm(g), name, ld));
}

void check_pointer(const GemmArgs& g, const char* name, const void* p, DType t, bool needed) {
  if (needed && !p)
    throw ShapeError(fmt::format("{}: {} is null but the call reads or writes it", describe_gemm(g),
                                 name));
  const size_t size = dtype_size(t);
  if (p && reinterpret_cast<uintptr_t>(p) % size != 0)
    throw ShapeError(fmt::format("{}: {} = {} is not aligned to its element size ({} bytes, {})",
                                 describe_gemm(g), name, p, size, dtype_name(t)));
}

}  // namespace

std::string_view gemm_epilogue_name(GemmEpilogue epilogue) {
  switch (epilogue) {
    case GemmEpilogue::None: return "none";
    case GemmEpilogue::Bias: return "bias";
    case GemmEpilogue::BgradOpA: return "bgrad_op_a";
  }
  return "unknown";
}

std::string describe_gemm(const GemmArgs& g) {
  return fmt::format("gemm (M={}, N={}, K={}, A {} {}, B {} {}, C {}, epilogue {})", g.M, g.N, g.K,
                     dtype_name(g.a_type), g.trans_a ? "T" : "N", dtype_name(g.b_type),
                     g.trans_b ? "T" : "N", dtype_name(g.c_type), gemm_epilogue_name(g.epilogue));
}

void check_gemm_args(const GemmArgs& g) {
  if (!supported_types(g.a_type, g.b_type, g.c_type))
    throw DeviceError(fmt::format(
        "{}: unsupported type combination; supported: A, B and C f32; A and B both bf16 (or both "
        "f16) with C f32 or the same 16-bit type",
        describe_gemm(g)));
  const int e = static_cast<int>(g.epilogue);
  if (e < static_cast<int>(GemmEpilogue::None) || e > static_cast<int>(GemmEpilogue::BgradOpA))
    throw ShapeError(fmt::format("{}: unknown epilogue value {}", describe_gemm(g), e));
  if (g.M < 0 || g.N < 0 || g.K < 0)
    throw ShapeError(fmt::format("{}: negative size", describe_gemm(g)));

  // Stored shapes: A (M, K) or (K, M); B (K, N) or (N, K); C and aux (M, N).
  check_ld(g, "lda", g.lda, g.trans_a ? g.K : g.M, g.trans_a ? g.M : g.K, g.trans_a ? "M" : "K",
           g.trans_a ? "A stored (K, M)" : "A stored (M, K)");
  check_ld(g, "ldb", g.ldb, g.trans_b ? g.N : g.K, g.trans_b ? g.K : g.N, g.trans_b ? "K" : "N",
           g.trans_b ? "B stored (N, K)" : "B stored (K, N)");
  check_ld(g, "ldc", g.ldc, g.M, g.N, "N", "C stored (M, N)");

  const bool product = g.M > 0 && g.N > 0 && g.K > 0;
  const bool out = g.M > 0 && g.N > 0;
  check_pointer(g, "A", g.A, g.a_type, product);
  check_pointer(g, "B", g.B, g.b_type, product);
  check_pointer(g, "C", g.C, g.c_type, out);

  const GemmEpilogue ep = g.epilogue;
  if (ep == GemmEpilogue::Bias) {
    const bool type_ok = g.bias_type == DType::F32 ||
                         (is_16bit_float(g.c_type) && g.bias_type == g.c_type);
    if (!type_ok)
      throw ShapeError(fmt::format("{}: bias of type {}; expected f32 or C's 16-bit type",
                                   describe_gemm(g), dtype_name(g.bias_type)));
    check_pointer(g, "bias", g.bias, g.bias_type, g.N > 0);
  } else if (g.bias) {
    throw ShapeError(fmt::format("{}: bias is set but epilogue {} does not add a bias",
                                 describe_gemm(g), gemm_epilogue_name(ep)));
  }
  if (ep == GemmEpilogue::BgradOpA) {
    if (!g.trans_a)
      throw ShapeError(fmt::format("{}: epilogue bgrad_op_a needs A stored transposed (K, M) "
                                   "(trans_a), as dout is in dW = dout^T @ x",
                                   describe_gemm(g)));
    check_pointer(g, "bias_grad", g.bias_grad, DType::F32, g.M > 0);
  } else if (g.bias_grad) {
    throw ShapeError(fmt::format("{}: bias_grad is set but epilogue {} does not write it",
                                 describe_gemm(g), gemm_epilogue_name(ep)));
  }
}

}  // namespace ftune::cuda
