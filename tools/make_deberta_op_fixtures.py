#!/usr/bin/env python3
"""Golden fixtures for ftune's disentangled_attention op (tests/ops/disentangled_attention_test.cc).

Each case builds transformers' own DebertaV2 DisentangledSelfAttention from a tiny config (its
position_buckets, max_relative_positions, share_att_key and pos_att_type), runs it on random
hidden states and random relative embeddings with a padded key mask (the pairwise mask
DebertaV2Encoder.get_attention_mask builds), and lets torch autograd differentiate the context for
a random upstream gradient. Forward hooks on the projections record what the op takes: q, k, v
(the projections of the hidden states) and pos_key / pos_query (the projections of the relative
embeddings: key_proj / query_proj with share_att_key, else pos_key_proj / pos_query_proj), with
their gradients. fp32, eval mode (no dropout: torch's RNG is not ftune's).

Also the relative-index tables r(delta) = clamp(bucket(delta) + S, 0, 2S - 1) of several bucket
settings, from transformers' build_relative_position, over deltas -(T-1) .. T-1.

Written to tests/fixtures/deberta/disentangled_cases.safetensors, per case `<case>.<tensor>`:
  q, k, v, dout, out, dq, dk, dv (N, C); pos_key, pos_query, dpos_key, dpos_query (2S, C) where
  the case's pos_att_type uses them; key_mask (N) i32; and `index.<name>` (2T - 1) i32 tables.
Metadata "cases" (JSON): {name, heads, head_dim, batch, seq, c2p, p2c, position_buckets,
max_relative_positions}; "indices": {name, seq, position_buckets, max_relative_positions}.

    /work/venv-oracle/bin/python tools/make_deberta_op_fixtures.py
"""
import json
import os

import torch
from safetensors.torch import save_file
from transformers import DebertaV2Config
from transformers.models.deberta_v2 import modeling_deberta_v2 as md

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "deberta")
torch.manual_seed(20261126)
tensors, cases, indices = {}, [], []


def case(name, heads, head_dim, batch, seq, lengths, pos_att_type, share, buckets, max_rel,
         max_pos=64):
    C = heads * head_dim
    cfg = DebertaV2Config(hidden_size=C, num_attention_heads=heads, relative_attention=True,
                          pos_att_type=pos_att_type, share_att_key=share,
                          position_buckets=buckets, max_relative_positions=max_rel,
                          max_position_embeddings=max_pos, attention_probs_dropout_prob=0.0,
                          hidden_dropout_prob=0.0)
    att = md.DisentangledSelfAttention(cfg).eval()
    S = att.pos_ebd_size
    hidden = torch.randn(batch, seq, C)
    rel = torch.randn(2 * S, C)
    mask = torch.zeros(batch, seq, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    m4 = mask[:, None, None, :] * mask[:, None, :, None]
    seen = {}

    def hook(label):
        def f(_module, _inputs, output):
            output.retain_grad()
            seen.setdefault(label, []).append(output)
        return f

    for label in ("query_proj", "key_proj", "value_proj", "pos_key_proj", "pos_query_proj"):
        if hasattr(att, label):
            getattr(att, label).register_forward_hook(hook(label))
    out, _ = att(hidden, m4, rel_embeddings=rel)
    dout = torch.randn_like(out)
    out.backward(dout)
    q, k, v = seen["query_proj"][0], seen["key_proj"][0], seen["value_proj"][0]
    c2p, p2c = "c2p" in pos_att_type, "p2c" in pos_att_type
    got = {"q": q, "k": k, "v": v, "out": out, "dout": dout}
    if c2p:
        got["pos_key"] = seen["key_proj"][1] if share else seen["pos_key_proj"][0]
    if p2c:
        got["pos_query"] = seen["query_proj"][1] if share else seen["pos_query_proj"][0]
    for key, t in list(got.items()):
        tensors[f"{name}.{key}"] = t.detach().reshape(-1, C).contiguous()
        if key not in ("out", "dout"):
            tensors[f"{name}.d{key}"] = t.grad.reshape(-1, C).contiguous()
    tensors[f"{name}.key_mask"] = mask.reshape(-1).to(torch.int32)
    cases.append(dict(name=name, heads=heads, head_dim=head_dim, batch=batch, seq=seq, c2p=c2p,
                      p2c=p2c, position_buckets=buckets,
                      max_relative_positions=att.max_relative_positions))


def index(name, seq, buckets, max_rel):
    x = torch.zeros(1, seq, 1)
    rel = md.build_relative_position(x, x, bucket_size=buckets, max_position=max_rel)[0]
    S = buckets if buckets > 0 else max_rel
    r = torch.clamp(rel + S, 0, 2 * S - 1)
    # r(i, j) depends on i - j only: column 0 gives deltas 0 .. T-1, row 0 deltas 0 .. -(T-1).
    table = torch.cat([r[0, 1:].flip(0), r[:, 0]])
    assert all(int(r[i, j]) == int(table[i - j + seq - 1]) for i in range(0, seq, 7)
               for j in range(0, seq, 5))
    tensors[f"index.{name}"] = table.to(torch.int32).contiguous()
    indices.append(dict(name=name, seq=seq, position_buckets=buckets, max_relative_positions=max_rel))


# DeBERTa-v3's shape of attention, with a bucket window (8) far shorter than the sequence (21).
case("v3_shared_buckets", 2, 8, 2, 21, [21, 13], ["p2c", "c2p"], True, 8, 32)
# Separate position projections, no buckets: plain distances clamped to +-6.
case("v2_separate_clamped", 2, 4, 2, 12, [12, 7], ["c2p", "p2c"], False, -1, 6)
case("c2p_only", 3, 4, 1, 17, [17], ["c2p"], False, 4, 16)
case("p2c_only_shared", 2, 4, 2, 9, [5, 9], ["p2c"], True, 6, 20)

index("v3_base_512", 512, 256, 512)
index("b8_m32", 300, 8, 32)
index("b4_m16", 64, 4, 16)
index("b32_m64", 200, 32, 64)
index("b64_m128_seq600", 600, 64, 128)

if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    save_file(tensors, os.path.join(OUT, "disentangled_cases.safetensors"),
              metadata={"cases": json.dumps(cases), "indices": json.dumps(indices)})
    print(f"{len(cases)} cases, {len(indices)} index tables")
