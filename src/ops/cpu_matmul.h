// Frozen weights packed once for oneDNN's matmul primitive: the CPU scoring path (issue 39).
//
// dnnl_sgemm (ops/cpu_gemm_library.h) packs its operands on every call: a quarter of a scoring
// call went to packing weights that never change. Here a linear layer's weight is reordered once
// into the blocked layout oneDNN's matmul primitive asks for (its brgemm kernels), and the bias is
// the primitive's own bias argument (no broadcast pass before the GEMM). Primitives are made once
// per shape (rows, out, in, strides, precision) on each compute thread and kept; the rows of a
// product are cut into blocks of at most kMatmulRows, a multiple of the thread count, so a pass
// sees few distinct shapes and each block's output stays in cache.
//
// Opt-in bf16 (MatmulPrecision::BF16): weights packed as bf16, each block's input rounded to bf16,
// fp32 accumulation and output; for CPUs with native bf16 (AVX512-BF16, AMX; oneDNN emulates
// nothing here: packed_matmul_supports() says whether the CPU has it).
//
// Weights are found by address: a PackedWeights belongs to a caller that guarantees its weights
// neither move nor change while it lives (LoadedClassifier: the model is loaded once and only
// read). The path is used inside a FrozenWeightsScope by cpu::linear_forward; elsewhere, or where
// oneDNN is not the CPU GEMM library or its matmul cannot be made, linear_forward runs the plain
// GEMM as before. The oneDNN C API is taken from its header at build time (Debian libdnnl-dev),
// its functions from the library loaded at run time; without the header this path is left out.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace ftune::cpu {

enum class MatmulPrecision { F32, BF16 };

// "fp32" / "bf16".
const char* matmul_precision_name(MatmulPrecision p);
// Parses "fp32" (or "f32") and "bf16"; anything else, or bf16 where the CPU has no native bf16 or
// the packed path is unavailable, is an InputError naming `what` (the variable or option).
MatmulPrecision parse_matmul_precision(const std::string& text, const std::string& what);

// Whether the packed path can run at `precision` (oneDNN loaded and the CPU GEMM library, its
// matmul API the header's major version, and for bf16 a CPU with native bf16); else why not.
bool packed_matmul_supports(MatmulPrecision precision);
std::string packed_matmul_unavailable_reason(MatmulPrecision precision);
// FTUNE_PACKED_MATMUL=0 turns the packed path off (the plain GEMM everywhere), as does
// set_packed_matmul_enabled(false) (benchmarks comparing the two, tests).
bool packed_matmul_enabled();
void set_packed_matmul_enabled(bool enabled);
// One line for `ftune doctor`: whether scoring uses packed weights, the kernels, bf16 support.
std::string matmul_description();

// Rows of a product per block (a multiple of 16).
constexpr int64_t kMatmulRows = 256;

class PackedWeights {
 public:
  explicit PackedWeights(MatmulPrecision precision = MatmulPrecision::F32);
  ~PackedWeights();
  PackedWeights(const PackedWeights&) = delete;
  PackedWeights& operator=(const PackedWeights&) = delete;

  MatmulPrecision precision() const { return precision_; }
  // out (N, OC) = inp (N, C) @ weight (OC, C)^T [+ bias (OC)], row strides ldo and ldi; the weight
  // is packed on its first use. False (nothing written) where the packed path cannot run: the
  // caller runs the plain GEMM.
  bool linear(float* out, int64_t ldo, const float* inp, int64_t ldi, const float* weight,
              const float* bias, int64_t N, int64_t C, int64_t OC);
  int64_t packed_count() const;  // weights packed so far
  int64_t packed_bytes() const;  // their size in the packed layout

  struct Impl;

 private:
  MatmulPrecision precision_;
  std::unique_ptr<Impl> impl_;
};

// While one lives, cpu::linear_forward on the thread that opened it runs through `weights` (null:
// the plain GEMM). Scopes nest; the innermost wins.
class FrozenWeightsScope {
 public:
  explicit FrozenWeightsScope(PackedWeights* weights);
  ~FrozenWeightsScope();
  FrozenWeightsScope(const FrozenWeightsScope&) = delete;
  FrozenWeightsScope& operator=(const FrozenWeightsScope&) = delete;

 private:
  PackedWeights* previous_;
};
PackedWeights* frozen_weights();

// Matmul primitives made and reused so far, over all threads (tests, benchmarks).
struct MatmulCacheStats {
  int64_t created = 0, reused = 0;
};
MatmulCacheStats matmul_cache_stats();

}  // namespace ftune::cpu
