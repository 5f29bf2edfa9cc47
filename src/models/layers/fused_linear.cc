// The fused linear block's passes (see fused_linear.h).
#include "models/layers/fused_linear.h"

#include "core/error.h"
#include "core/tensor_columns.h"

namespace ftune {

FusedLinear::FusedLinear(AdaptedLinear fused, std::initializer_list<FusedBlock> blocks,
                         AllDora all_dora)
    : fused_(std::move(fused)), all_dora_(all_dora) {
  if (blocks.size() > blocks_.size()) throw InternalError("FusedLinear: more than 3 row blocks");
  for (const FusedBlock& b : blocks) blocks_[num_blocks_++] = b;
}

bool FusedLinear::fused_gemm() const {
  if (all_dora_ == AllDora::RunFusedGemm) return true;
  for (int i = 0; i < num_blocks_; ++i)
    if (!blocks_[i].site.dora()) return true;
  return false;
}

void FusedLinear::forward(TensorView y, TensorView x, TensorView xg, bool recompute) const {
  if (num_blocks_ == 0) {
    fused_.forward(y, x, xg, /*y_has_base=*/false, recompute);
    return;
  }
  const bool fused = fused_gemm();
  if (fused) fused_.forward(y, xg, xg);
  for (int i = 0; i < num_blocks_; ++i) {
    const FusedBlock& b = blocks_[i];
    b.site.forward(columns(y, b.col0, b.cols), x, xg, /*y_has_base=*/fused, recompute);
  }
}

void FusedLinear::backward(TensorView dy, TensorView x, TensorView xg, TensorView dx,
                           bool accumulate, bool guard) const {
  if (num_blocks_ == 0) {
    fused_.backward(dy, x, xg, dx, accumulate, guard);
    return;
  }
  for (int i = 0; i < num_blocks_; ++i)
    blocks_[i].site.backward_scale(columns(dy, blocks_[i].col0, blocks_[i].cols));
  fused_.base_backward(dy, xg, dx, accumulate, guard);
  for (int i = 0; i < num_blocks_; ++i)
    blocks_[i].site.backward_adapter(columns(dy, blocks_[i].col0, blocks_[i].cols), x, dx);
}

}  // namespace ftune
