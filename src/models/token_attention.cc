// The attention op's call for a token batch (see token_attention.h).
#include "models/token_attention.h"

namespace ftune {

AttentionCall token_attention_call(const AttentionSpec& spec, const TokenInputs& in,
                                   const DropoutPlan& d, float p, uint32_t site,
                                   TensorView workspace) {
  AttentionCall call;
  call.spec = spec;
  if (in.packed())
    call.rows = {in.B, in.max_len, in.cu_seqlens, {}};
  else
    call.rows = {in.B, in.T, {}, in.mask.prefix(Shape{in.B, in.T})};
  call.dropout_p = p;
  call.rng = RngKey{d.seed, site, d.offset, d.micro};
  call.place = dropout_rows(d, in);
  call.workspace = workspace;
  return call;
}

}  // namespace ftune
