#!/usr/bin/env python3
"""HF's eager DeBERTa-v2/v3 in fp16 on large activations: the case of ftune's test
DebertaF16.ProductsPastF16RangeStayFinite (tests/models/encoder_precision_test.cc), through
transformers itself.

The tiny DeBERTa-v3 of tests/fixtures/engine/deberta_v3_pair with its query_proj and key_proj
weights scaled 600x, on the fixture's batch: in fp32 the logits are finite; in fp16 (model.half(),
HF's eager DisentangledSelfAttention) the c2p / p2c products q . pk are formed unscaled by
torch.bmm in fp16 and pass 65504, giving inf and then NaN out of the softmax. Prints both, and
whether torch.autocast(fp16) on the fp32 model does the same. Runs on the CPU in seconds (needs
torch + transformers: tools/requirements-dev.txt).

    python tools/deberta_fp16_overflow.py
"""

import math
import os

import torch
from safetensors.torch import load_file
from transformers import DebertaV2ForSequenceClassification

HERE = os.path.dirname(os.path.abspath(__file__))
CASE = os.path.join(HERE, "..", "tests", "fixtures", "engine", "deberta_v3_pair")
SCALE = 600.0


def model():
    m = DebertaV2ForSequenceClassification.from_pretrained(os.path.join(CASE, "model"),
                                                           attn_implementation="eager")
    with torch.no_grad():
        for layer in m.deberta.encoder.layer:
            layer.attention.self.query_proj.weight.mul_(SCALE)
            layer.attention.self.key_proj.weight.mul_(SCALE)
    return m.eval()


def largest_c2p_product(m, batch):
    """max |q . pk| over heads of layer 0, in fp32 (what fp16 must hold before the division)."""
    with torch.no_grad():
        h = m.deberta.embeddings(input_ids=batch["input_ids"], mask=batch["attention_mask"])
        att = m.deberta.encoder.layer[0].attention.self
        rel = m.deberta.encoder.get_rel_embedding()
        heads, d = att.num_attention_heads, att.attention_head_size
        q = att.query_proj(h).view(h.shape[0], h.shape[1], heads, d).transpose(1, 2)
        pk = att.key_proj(rel).view(rel.shape[0], heads, d).transpose(0, 1)
        return torch.einsum("bhid,hrd->bhir", q, pk).abs().max().item()


def main():
    batch = {k: v for k, v in load_file(os.path.join(CASE, "inputs.safetensors")).items()
             if k in ("input_ids", "attention_mask")}
    m = model()
    print(f"largest unscaled c2p product q . pk (layer 0): {largest_c2p_product(m, batch):.3g} "
          f"(fp16 max 65504)")
    with torch.no_grad():
        f32 = m(**batch).logits
        with torch.autocast("cpu", dtype=torch.float16):
            amp = m(**batch).logits
        f16 = m.half()(**batch).logits
    for name, logits in (("fp32", f32), ("autocast fp16", amp), ("model.half()", f16)):
        bad = (~torch.isfinite(logits)).sum().item()
        print(f"{name:14s} non-finite logits: {bad} of {logits.numel()}  "
              f"{logits.float().flatten()[:4].tolist()}")


if __name__ == "__main__":
    main()
