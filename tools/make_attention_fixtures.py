#!/usr/bin/env python3
"""Golden fixtures for ftune's attention op (tests/ops/attention_golden_test.cc).

Each case runs the attention core exactly as a transformers model family computes it: the
family's attention module is built from a tiny config (so its scaling, soft-cap, sliding window
and kv-head grouping are the modeling file's own), its mask comes from the family's masking_utils
call (create_causal_mask, create_sliding_window_causal_mask, create_bidirectional_mask,
create_bidirectional_sliding_window_mask; packed rows through position_ids that restart at 0),
and its eager_attention_forward computes the output, which torch autograd differentiates for a
random upstream gradient. BERT's case uses torch's scaled_dot_product_attention with a boolean key
mask. fp32 throughout, no dropout (torch's RNG is not ftune's).

Written to tests/fixtures/attention/attention_cases.safetensors, per case `<case>.<tensor>`:
  q (N, Hq*D), k and v (N, Hkv*D), dout (N, Hq*D), out (N, Hq*D), dq, dk, dv   f32, token-major
  key_mask (N) i32 (padded cases), cu_seqlens (B+1) i32 (packed cases)
and in the metadata "cases", a JSON list of {name, family, heads, kv_heads, head_dim, batch,
max_seq, causal, scale, softcap, layout, and the HF config key of its window: sliding_window,
bidirectional_sliding_window (Gemma 3 use_bidirectional_attention, the config.json value) or
local_attention}.

    /work/venv-oracle/bin/python tools/make_attention_fixtures.py
"""
import json
import os

import torch
from safetensors.torch import save_file
import transformers
from transformers import masking_utils
from transformers.models.gemma2 import modeling_gemma2
from transformers.models.gemma3 import modeling_gemma3
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral
from transformers.models.modernbert import modeling_modernbert

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "attention")

torch.manual_seed(20261117)
tensors = {}
cases = []


def heads_first(x, B, T, H, D):
    """(B*T, H*D) token-major -> (B, H, T, D)."""
    return x.view(B, T, H, D).transpose(1, 2)


def tokens_first(x):
    """(B, H, T, D) -> (B*T, H*D)."""
    B, H, T, D = x.shape
    return x.transpose(1, 2).reshape(B * T, H * D)


def record(name, meta, q, k, v, dout, out, mask=None, cu_seqlens=None):
    out.backward(dout)
    for key, t in (("q", q), ("k", k), ("v", v), ("dout", dout), ("out", out)):
        tensors[f"{name}.{key}"] = t.detach().contiguous()
    for key, t in (("dq", q.grad), ("dk", k.grad), ("dv", v.grad)):
        tensors[f"{name}.{key}"] = t.contiguous()
    if mask is not None:
        tensors[f"{name}.key_mask"] = mask.reshape(-1).to(torch.int32).contiguous()
    if cu_seqlens is not None:
        tensors[f"{name}.cu_seqlens"] = torch.tensor(cu_seqlens, dtype=torch.int32)
    cases.append(dict(name=name, **meta))


def inputs(N, Hq, Hkv, D, spread=2.0):
    q = (torch.rand(N, Hq * D) * 2 - 1) * spread
    k = (torch.rand(N, Hkv * D) * 2 - 1) * spread
    v = torch.rand(N, Hkv * D) * 2 - 1
    dout = torch.rand(N, Hq * D) * 2 - 1
    return [t.requires_grad_() for t in (q, k, v)] + [dout]


def eager_case(name, family, module, eager, mask_fn, config, B, T, lengths, left_pad, window,
               extra=None, packed=False):
    """One family's eager attention over B rows of T tokens (padded with a key mask), or over
    the rows of `lengths` packed into one row of N tokens (position_ids restart at 0)."""
    Hq, Hkv, D = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    module.eval()
    if packed:
        N = sum(lengths)
        q, k, v, dout = inputs(N, Hq, Hkv, D)
        position_ids = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
        embeds = torch.zeros(1, N, config.hidden_size)
        mask = mask_fn(config=config, inputs_embeds=embeds, attention_mask=None,
                       past_key_values=None, position_ids=position_ids)
        qh, kh, vh = (heads_first(x, 1, N, h, D) for x, h in ((q, Hq), (k, Hkv), (v, Hkv)))
        o, _ = eager(module, qh, kh, vh, mask, **(extra or {}))
        out = o.reshape(N, Hq * D)
        cu = [0]
        for n in lengths:
            cu.append(cu[-1] + n)
        meta = dict(batch=len(lengths), max_seq=max(lengths), layout="packed")
        key_mask = None
    else:
        N = B * T
        q, k, v, dout = inputs(N, Hq, Hkv, D)
        key_mask = torch.zeros(B, T, dtype=torch.long)
        for b, n in enumerate(lengths):
            if left_pad:
                key_mask[b, T - n:] = 1
            else:
                key_mask[b, :n] = 1
        embeds = torch.zeros(B, T, config.hidden_size)
        mask = mask_fn(config=config, inputs_embeds=embeds, attention_mask=key_mask,
                       past_key_values=None)
        qh, kh, vh = (heads_first(x, B, T, h, D) for x, h in ((q, Hq), (k, Hkv), (v, Hkv)))
        o, _ = eager(module, qh, kh, vh, mask, **(extra or {}))
        out = o.reshape(N, Hq * D)
        cu = None
        meta = dict(batch=B, max_seq=T, layout="padded")
    meta.update(family=family, heads=Hq, kv_heads=Hkv, head_dim=D, **window)
    meta.update(scale=float(extra.get("scaling")) if extra and "scaling" in extra else None)
    record(name, meta, q, k, v, dout, out, mask=key_mask, cu_seqlens=cu)


def eager_config(cls, **kw):
    c = cls(**kw)
    c._attn_implementation = "eager"
    return c


def llama_case():
    c = eager_config(transformers.LlamaConfig, hidden_size=64, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=8, intermediate_size=64, vocab_size=10)
    m = modeling_llama.LlamaAttention(c, layer_idx=0)
    # Left padding: the padding queries of a causal row see no real key (uniform rows).
    eager_case("llama_gqa_causal_left_padded", "llama", m, modeling_llama.eager_attention_forward,
               masking_utils.create_causal_mask, c, B=3, T=7, lengths=[7, 4, 2], left_pad=True,
               window=dict(causal=True, softcap=0.0),
               extra=dict(scaling=m.scaling, dropout=0.0))
    c1 = eager_config(transformers.LlamaConfig, hidden_size=64, num_attention_heads=4,
                      num_key_value_heads=1, head_dim=8, intermediate_size=64, vocab_size=10)
    m1 = modeling_llama.LlamaAttention(c1, layer_idx=0)
    eager_case("llama_mqa_causal_packed", "llama", m1, modeling_llama.eager_attention_forward,
               masking_utils.create_causal_mask, c1, B=None, T=None, lengths=[5, 1, 8, 3],
               left_pad=False, window=dict(causal=True, softcap=0.0),
               extra=dict(scaling=m1.scaling, dropout=0.0), packed=True)


def mistral_cases():
    c = eager_config(transformers.MistralConfig, hidden_size=64, num_attention_heads=4,
                     num_key_value_heads=1, head_dim=16, intermediate_size=64, vocab_size=10,
                     sliding_window=3)
    m = modeling_mistral.MistralAttention(c, layer_idx=0)
    common = dict(window=dict(causal=True, softcap=0.0, sliding_window=c.sliding_window),
                  extra=dict(scaling=m.scaling, dropout=0.0))
    eager_case("mistral_sliding_right_padded", "mistral", m,
               modeling_mistral.eager_attention_forward,
               masking_utils.create_sliding_window_causal_mask, c, B=2, T=8, lengths=[8, 5],
               left_pad=False, **common)
    eager_case("mistral_sliding_packed", "mistral", m, modeling_mistral.eager_attention_forward,
               masking_utils.create_sliding_window_causal_mask, c, B=None, T=None,
               lengths=[6, 2, 9], left_pad=False, packed=True, **common)


def gemma2_case():
    c = eager_config(transformers.Gemma2Config, hidden_size=48, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=12, intermediate_size=64, vocab_size=10,
                     query_pre_attn_scalar=20, attn_logit_softcapping=2.5, sliding_window=4,
                     layer_types=["sliding_attention"], num_hidden_layers=1)
    m = modeling_gemma2.Gemma2Attention(c, layer_idx=0)
    assert m.sliding_window == 4 and m.attn_logit_softcapping == 2.5
    eager_case("gemma2_softcap_sliding", "gemma2", m, modeling_gemma2.eager_attention_forward,
               masking_utils.create_sliding_window_causal_mask, c, B=2, T=9, lengths=[9, 6],
               left_pad=False,
               window=dict(causal=True, softcap=m.attn_logit_softcapping,
                           sliding_window=m.sliding_window),
               extra=dict(scaling=m.scaling, dropout=0.0, softcap=m.attn_logit_softcapping))


def gemma3_bidirectional_case():
    c = eager_config(transformers.Gemma3TextConfig, hidden_size=48, num_attention_heads=2,
                     num_key_value_heads=1, head_dim=16, intermediate_size=64, vocab_size=10,
                     query_pre_attn_scalar=16, sliding_window=4, num_hidden_layers=1,
                     layer_types=["sliding_attention"], use_bidirectional_attention=True)
    m = modeling_gemma3.Gemma3Attention(c, layer_idx=0)
    # The config keeps sliding_window // 2 + 1 in memory (exclusive bound); config.json holds 4.
    json_window = c.to_dict()["sliding_window"]
    assert c.sliding_window == 3 and json_window == 4

    # What Gemma3TextModel.forward builds for its sliding layers with use_bidirectional_attention.
    def mask_fn(**kw):
        return masking_utils.create_sliding_window_causal_mask(
            **kw, or_mask_function=modeling_gemma3._bidirectional_window_overlay(c.sliding_window))

    eager_case("gemma3_bidirectional_sliding", "gemma3", m,
               modeling_gemma3.eager_attention_forward, mask_fn, c, B=2, T=8, lengths=[8, 6],
               left_pad=False,
               window=dict(causal=False, softcap=0.0,
                           bidirectional_sliding_window=json_window),
               extra=dict(scaling=m.scaling, dropout=0.0))


def modernbert_case():
    c = eager_config(transformers.ModernBertConfig, hidden_size=32, num_attention_heads=2,
                     intermediate_size=64, local_attention=4, num_hidden_layers=1,
                     layer_types=["sliding_attention"])
    c.num_key_value_heads = c.num_attention_heads
    c.head_dim = c.hidden_size // c.num_attention_heads
    m = modeling_modernbert.ModernBertAttention(c, layer_idx=0)
    m.num_key_value_groups = 1
    eager_case("modernbert_local_padded", "modernbert", m,
               modeling_modernbert.eager_attention_forward,
               masking_utils.create_bidirectional_sliding_window_mask, c, B=2, T=9, lengths=[9, 5],
               left_pad=False,
               window=dict(causal=False, softcap=0.0, local_attention=c.local_attention),
               extra=dict(scaling=m.head_dim ** -0.5, dropout=0.0))


def bert_sdpa_case():
    B, T, H, D = 3, 7, 2, 8
    q, k, v, dout = inputs(B * T, H, H, D)
    lengths = [7, 3, 5]
    key_mask = torch.zeros(B, T, dtype=torch.long)
    for b, n in enumerate(lengths):
        key_mask[b, :n] = 1
    qh, kh, vh = (heads_first(x, B, T, H, D) for x in (q, k, v))
    allowed = key_mask.bool()[:, None, None, :].expand(B, 1, T, T)
    o = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, attn_mask=allowed)
    record("bert_sdpa_padded", dict(family="bert", heads=H, kv_heads=H, head_dim=D, batch=B,
                                    max_seq=T, layout="padded", causal=False, softcap=0.0,
                                    scale=None),
           q, k, v, dout, tokens_first(o), mask=key_mask)


def main():
    bert_sdpa_case()
    llama_case()
    mistral_cases()
    gemma2_case()
    gemma3_bidirectional_case()
    modernbert_case()
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "attention_cases.safetensors")
    save_file(tensors, path, metadata={
        "cases": json.dumps(cases),
        "generator": f"tools/make_attention_fixtures.py, transformers {transformers.__version__}, "
                     f"torch {torch.__version__}"})
    print(f"wrote {path}: {len(cases)} cases, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
