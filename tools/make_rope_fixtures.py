#!/usr/bin/env python3
"""Golden RoPE tables (tests/fixtures/rope/cases.json): for config.json contents of every rope type
ftune reads (models/rope_config.h), the inverse frequencies and attention scaling that
transformers' ROPE_INIT_FUNCTIONS (or the model's default init) compute, in fp32, written as the
exact decimal value of each fp32 number. Longrope cases carry both the short set (seq_len None) and
the long set (seq_len past original_max_position_embeddings). Gemma 3 cases give each layer type's.

    python tools/make_rope_fixtures.py [--out tests/fixtures/rope/cases.json]
"""

import argparse
import json
from pathlib import Path

import torch
import transformers
from transformers import Gemma3TextConfig, LlamaConfig, Qwen2Config
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

REPO = Path(__file__).resolve().parents[1]
BASE = dict(vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=37)


def longrope(dim_half, seed):
    g = torch.Generator().manual_seed(seed)
    return (1.0 + 3.0 * torch.rand(dim_half, generator=g, dtype=torch.float64)).tolist()


# name -> (config class, kwargs, layer types or None)
CASES = {
    # partial_rotary_factor: the default init of these families ignores it (whole heads rotate).
    "default_partial": (LlamaConfig, dict(head_dim=20, max_position_embeddings=4096,
                                          rope_parameters=dict(rope_type="default", rope_theta=500000.0,
                                                               partial_rotary_factor=0.5)), None),
    "linear": (Qwen2Config, dict(max_position_embeddings=4096,
                                 rope_parameters=dict(rope_type="linear", rope_theta=1000.0, factor=4.0)), None),
    "dynamic": (LlamaConfig, dict(max_position_embeddings=2048,
                                  rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0)), None),
    "llama3": (LlamaConfig, dict(max_position_embeddings=131072,
                                 rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
                                                      low_freq_factor=1.0, high_freq_factor=4.0,
                                                      original_max_position_embeddings=8192)), None),
    # Qwen2.5's long-context yarn (factor 4 over 32768).
    "yarn": (Qwen2Config, dict(max_position_embeddings=131072,
                               rope_parameters=dict(rope_type="yarn", rope_theta=1000000.0, factor=4.0,
                                                    original_max_position_embeddings=32768)), None),
    "yarn_mscale": (LlamaConfig, dict(max_position_embeddings=16384,
                                      rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=40.0,
                                                           original_max_position_embeddings=4096,
                                                           beta_fast=24.0, beta_slow=2.0, mscale=1.0,
                                                           mscale_all_dim=0.5, truncate=False)), None),
    "yarn_attention_factor": (LlamaConfig, dict(max_position_embeddings=8192,
                                                rope_parameters=dict(rope_type="yarn", rope_theta=10000.0,
                                                                     factor=2.0, attention_factor=1.25)), None),
    "longrope": (LlamaConfig, dict(max_position_embeddings=131072,
                                   rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                                        original_max_position_embeddings=4096,
                                                        short_factor=longrope(8, 1),
                                                        long_factor=longrope(8, 2))), None),
    "longrope_factor": (LlamaConfig, dict(max_position_embeddings=8192,
                                          rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                                               original_max_position_embeddings=4096, factor=3.0,
                                                               attention_factor=1.1,
                                                               short_factor=longrope(8, 3),
                                                               long_factor=longrope(8, 4))), None),
    # Gemma 3 4B+ text: linear 8 on the global layers, the local base on the sliding ones; and yarn.
    "gemma3_linear": (Gemma3TextConfig, dict(head_dim=16, max_position_embeddings=131072, sliding_window=8,
                                             sliding_window_pattern=2, rope_parameters=dict(
                                                 full_attention=dict(rope_type="linear", rope_theta=1000000.0,
                                                                     factor=8.0),
                                                 sliding_attention=dict(rope_type="default", rope_theta=10000.0))),
                      ["full_attention", "sliding_attention"]),
    "gemma3_yarn": (Gemma3TextConfig, dict(head_dim=16, max_position_embeddings=65536, sliding_window=8,
                                           sliding_window_pattern=2, rope_parameters=dict(
                                               full_attention=dict(rope_type="yarn", rope_theta=1000000.0,
                                                                   factor=8.0, original_max_position_embeddings=8192),
                                               sliding_attention=dict(rope_type="default", rope_theta=10000.0))),
                    ["full_attention", "sliding_attention"]),
}


def table(config, layer_type=None, seq_len=None):
    params = config.rope_parameters[layer_type] if layer_type else config.rope_parameters
    kind = params["rope_type"]
    kwargs = {"layer_type": layer_type} if layer_type else {}
    if kind == "default":
        inv, scale = LlamaRotaryEmbedding.compute_default_rope_parameters(config) if not layer_type else \
            type_default(config, layer_type)
    else:
        inv, scale = ROPE_INIT_FUNCTIONS[kind](config, None, seq_len=seq_len, **kwargs)
    assert inv.dtype == torch.float32
    return {"inv_freq": [float(x) for x in inv.tolist()], "attention_scaling": float(torch.tensor(scale, dtype=torch.float32))}


def type_default(config, layer_type):
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding
    return Gemma3RotaryEmbedding.compute_default_rope_parameters(config, None, layer_type=layer_type)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "tests/fixtures/rope/cases.json"))
    args = ap.parse_args()
    out = {"generator": {"script": "tools/make_rope_fixtures.py", "torch": torch.__version__.split("+")[0],
                         "transformers": transformers.__version__}, "cases": {}}
    for name, (cls, kwargs, layer_types) in CASES.items():
        config = cls(**BASE, **kwargs)
        saved = json.loads(config.to_json_string())
        saved["model_type"] = config.model_type
        case = {"config": saved}
        if layer_types:
            case["layer_types"] = {t: table(config, t) for t in layer_types}
        else:
            case.update(table(config))
            if config.rope_parameters["rope_type"] == "longrope":
                orig = config.rope_parameters["original_max_position_embeddings"]
                case["long"] = table(config, seq_len=orig + 1)
        out["cases"][name] = case
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
