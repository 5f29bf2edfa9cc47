// The fused linear block: one GEMM over a fused weight — BERT's and DeBERTa's query | key | value,
// the decoders' q | k | v and gate | up — with an adapted linear block (models/layers/
// adapted_linear.h) per row block of the fused matrix, i.e. per block of its output columns. It
// runs the fused frozen (or trained) GEMM once and each block's LoRA / DoRA term on its columns;
// backward in the order backward_scale (every block) -> the fused GEMM's backward ->
// backward_adapter (every block), so each block's DoRA scaling reaches the fused gradients. A
// block with one site over the whole output (no row blocks: ModernBERT's Wqkv and Wi, the
// feed-forward's in) is that site's own forward and backward.
// Gradient rule: as adapted_linear.h (parameter gradients +=, dx = or += as the caller says).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>

#include "models/layers/adapted_linear.h"

namespace ftune {

// The adapted site of output columns [col0, col0 + cols) of a fused GEMM.
struct FusedBlock {
  int64_t col0 = 0, cols = 0;
  AdaptedLinear site;
};

class FusedLinear {
 public:
  // When DoRA adapts every block, each block forms its own base product (DoRA needs it apart),
  // and the fused GEMM would be unused: BERT and DeBERTa skip it then; the decoders run it always.
  enum class AllDora { SkipFusedGemm, RunFusedGemm };

  // One site over the whole output (it may carry an adapter itself).
  FusedLinear(AdaptedLinear whole) : fused_(std::move(whole)) {}  // NOLINT: implicit on purpose
  // `fused`: the plain linear over the fused matrix; `blocks`: the adapted sites of its row blocks
  // (at most 3), in column order.
  FusedLinear(AdaptedLinear fused, std::initializer_list<FusedBlock> blocks, AllDora all_dora);

  // y (N, out) = x W^T + b with every block's adapter term. x: the adapters' input; xg: the GEMM's
  // (x, or its 16-bit copy). recompute: checkpointing's second forward (DoRA keeps its norms).
  void forward(TensorView y, TensorView x, TensorView xg, bool recompute = false) const;
  // dy (N, out): DoRA may scale its blocks in place. dx (N, in) = or += (accumulate) the input
  // gradient (undefined: not formed); guard: skip the fused GEMMs when nothing they write is
  // wanted.
  void backward(TensorView dy, TensorView x, TensorView xg, TensorView dx, bool accumulate = false,
                bool guard = false) const;

 private:
  bool fused_gemm() const;  // whether forward runs the fused GEMM
  AdaptedLinear fused_;
  std::array<FusedBlock, 3> blocks_{};
  int num_blocks_ = 0;
  AllDora all_dora_ = AllDora::RunFusedGemm;
};

}  // namespace ftune
