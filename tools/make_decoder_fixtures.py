#!/usr/bin/env python3
"""Writes the golden fixtures of the decoder families (tests/fixtures/engine/<case>/), in the
format of tools/make_engine_fixtures.py (whose loss, optimizer, schedule and writing helpers this
reuses): tiny random *ForSequenceClassification models from transformers, a right-padded
text-pair batch whose pad id differs from eos, logits, the final-norm hidden state, the loss,
every parameter gradient and the parameters after three AdamW steps with HF Trainer's decay
groups, clipping and a schedule. fp32 on the CPU, eager attention, deterministic.

Cases:
    llama_pair   LlamaForSequenceClassification: GQA (8 query / 4 kv heads), head_dim 6,
                 rope_type llama3 (its three frequency bands all present), SwiGLU, mlp_bias
    qwen2_pair   Qwen2ForSequenceClassification: GQA, q/k/v biases, rope_type linear
    mistral_pair MistralForSequenceClassification: GQA, sliding_window 4 (shorter than the rows)
    qwen3_pair   Qwen3ForSequenceClassification: q_norm / k_norm per head, explicit head_dim 6 with
                 hidden 40 (not heads x head_dim), attention_bias (q/k/v/o), layer 1 sliding (4)
    gemma2_pair  Gemma2ForSequenceClassification: 3 layers alternating sliding (4) / full / sliding,
                 GQA 8 / 2, head_dim 10, GeGLU (gelu_pytorch_tanh), (1 + w) RMSNorms before and
                 after attention and MLP, attn_logit_softcapping 3 (active: scores reach it),
                 query_pre_attn_scalar 20 (not head_dim), embeddings x sqrt(48)
    gemma3_pair  Gemma3TextForSequenceClassification: as Gemma 2 without soft-capping, plus q/k
                 (1 + w) norms, attention_bias, RoPE bases 10000 (sliding layers, default) and 100
                 (full layers, linear factor 2), layer_types from sliding_window_pattern 2
    gemma_pair   GemmaForSequenceClassification (Gemma 1): GeGLU from hidden_act "gelu" (HF reads
                 it as gelu_pytorch_tanh), (1 + w) RMSNorms before attention and MLP only,
                 embeddings x sqrt(48), head_dim 10 explicit, scores x head_dim^-1/2, GQA 8 / 2
    gemma3_mm_pair Gemma3ForSequenceClassification: the multimodal model_type gemma3 (text_config
                 as gemma3_pair's, a tiny SigLIP vision tower and projector that text-only input
                 never reaches), weights under model.language_model.*, pooling by text_config's pad

    python tools/make_decoder_fixtures.py [--out tests/fixtures/engine]
"""

import argparse
import json
import sys
from pathlib import Path

import torch
import transformers
from transformers import (
    Qwen3Config,
    Qwen3ForSequenceClassification,
    LlamaConfig,
    MistralConfig,
    MistralForSequenceClassification,
    LlamaForSequenceClassification,
    Qwen2Config,
    Qwen2ForSequenceClassification,
    Gemma2Config,
    Gemma2ForSequenceClassification,
    Gemma3TextConfig,
    Gemma3TextForSequenceClassification,
    Gemma3Config,
    Gemma3ForSequenceClassification,
    GemmaConfig,
    GemmaForSequenceClassification,
    SiglipVisionConfig,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_engine_fixtures as engine  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

SIZES = dict(
    vocab_size=97,
    hidden_size=48,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=4,  # GQA ratio 2
    head_dim=6,  # not a power of two (HF's RoPE needs an even head_dim)
    intermediate_size=37,
    max_position_embeddings=64,
    rms_norm_eps=1e-6,
    initializer_range=0.2,
    attention_dropout=0.0,
)
IDS = dict(pad=0, bos=1, eos=2, sep=3, first_content=4)
SEGMENTS = [(5, 5), (3, 3), (2, 1), (4, 3)]  # real lengths 13, 9, 6, 10: row 0 fills T
BATCH, SEQ = 4, 13
INIT_NOTE = (
    "HF _init_weights (normal(0, initializer_range) for Linear/Embedding weights, the embedding's "
    "padding_idx row 0), then every bias ~ normal(0, 0.1) and every RMSNorm weight ~ 1 + "
    "normal(0, 0.1) (Gemma's, which scale by 1 + w: normal(0, 0.1)), so that a dropped or swapped "
    "bias / norm weight shows in the logits"
)


def pair_batch(seed):
    """Right-padded '<bos> a <sep> b <eos>' rows (pad 0 != eos 2); positions 0..T-1 per row."""
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.full((BATCH, SEQ), IDS["pad"], dtype=torch.int64)
    attention_mask = torch.zeros((BATCH, SEQ), dtype=torch.int64)
    lengths = []
    for row, (len_a, len_b) in enumerate(SEGMENTS):
        a = torch.randint(IDS["first_content"], SIZES["vocab_size"], (len_a,), generator=gen).tolist()
        b = torch.randint(IDS["first_content"], SIZES["vocab_size"], (len_b,), generator=gen).tolist()
        ids = [IDS["bos"]] + a + [IDS["sep"]] + b + [IDS["eos"]]
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention_mask[row, : len(ids)] = 1
        lengths.append(len(ids))
    return dict(input_ids=input_ids, attention_mask=attention_mask), lengths


def build(model_cls, config, seed):
    torch.manual_seed(seed)
    model = model_cls(config)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif "norm" in name:  # Gemma's RMSNorms scale by 1 + w
                offset = 0.0 if config.model_type.startswith("gemma") else 1.0
                if "vision_tower" in name or "multi_modal_projector" in name:
                    continue  # the vision side's LayerNorms keep HF's init
                p.copy_(offset + 0.1 * torch.randn(p.shape, generator=gen))
    for name, p in model.named_parameters():
        if "vision_tower" in name or "multi_modal_projector" in name:
            p.requires_grad_(False)  # text-only input never reaches them: no gradient to compare
    model.config._attn_implementation = "eager"
    return model


def forward(model, inputs):
    out = model(**inputs, output_hidden_states=True)
    return out.logits, out.hidden_states[-1]


def training_case(out_root, name, model, inputs, lengths, labels, loss_cfg, opt_cfg, max_grad_norm, sched_cfg):
    case_dir = engine.fresh_dir(out_root / name)
    model.save_pretrained(str(case_dir / "model"), safe_serialization=True)
    # The engine's loader reads token_type_ids too: all 0 (decoders have none).
    engine.write_inputs(case_dir, {**inputs, "token_type_ids": torch.zeros_like(inputs["input_ids"])}, labels)
    expected, losses, grad_norms, lrs, param_names, no_decay = engine.train_steps(
        name, model, inputs, labels, loss_cfg, opt_cfg, max_grad_norm, sched_cfg, forward)
    engine.write_expected(case_dir, expected)

    reloaded = type(model).from_pretrained(str(case_dir / "model"), dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        again, _ = forward(reloaded, inputs)
    assert torch.equal(again, expected["logits"].detach()), f"{name}: reload does not reproduce logits"

    config = model.config.get_text_config()
    info = {
        "case": name,
        "model_type": config.model_type,
        "architecture": type(model).__name__,
        "config_model_type": model.config.model_type,
        "hidden_act": getattr(config, "hidden_act", None) or config.hidden_activation,
        "num_labels": model.config.num_labels,
        "attn_implementation": "eager",
        "dropout": "attention_dropout 0.0 (saved so in model/config.json)",
        "init": INIT_NOTE,
        "rope_parameters": getattr(config, "rope_parameters", None),
        "batch": {
            "batch_size": BATCH,
            "seq_len": SEQ,
            "real_lengths": lengths,
            "format": "<bos> a <sep> b <eos>",
            "padding": "right",
            "special_ids": {k: v for k, v in IDS.items() if k != "first_content"},
            "pooling": "HF: the last token whose id != pad_token_id (here each row's <eos>)",
            "embedding_padding_idx": "embed_tokens is nn.Embedding(padding_idx=pad): that row gets no gradient",
            "position_ids": "0..T-1 for every row (padded positions included)",
        },
        "loss": {**loss_cfg, "reduction": "mean", "computed": "outside the model", "formula": engine.FORMULAS["loss"]},
        "optimizer": {"type": "adamw", **opt_cfg, "no_decay": no_decay, "formula": engine.FORMULAS["adamw"]},
        "max_grad_norm": max_grad_norm,
        "grad_clip": {"formula": engine.FORMULAS["grad_clip"], "clipped": [g > max_grad_norm for g in grad_norms]},
        "schedule": {**sched_cfg, "formula": engine.FORMULAS[sched_cfg["type"]]},
        "steps": engine.STEPS,
        "losses": losses,
        "grad_norms": grad_norms,
        "lrs": lrs,
        "param_names": param_names,
        "generator": {
            "script": "tools/make_decoder_fixtures.py",
            "torch": torch.__version__.split("+")[0],
            "transformers": transformers.__version__,
        },
    }
    (case_dir / "case.json").write_text(json.dumps(info, indent=2) + "\n")


def common(num_labels):
    return dict(**SIZES, pad_token_id=IDS["pad"], bos_token_id=IDS["bos"], eos_token_id=IDS["eos"],
                num_labels=num_labels)


# Gemma: 3 layers (sliding, full, sliding), GQA 4, head_dim 10 (hidden 48 is no multiple of it).
GEMMA = dict(common(3), num_hidden_layers=3, num_key_value_heads=2, head_dim=10, sliding_window=4,
             query_pre_attn_scalar=20)

CASES = {
    "llama_pair": lambda: build(
        LlamaForSequenceClassification,
        LlamaConfig(
            **common(3), hidden_act="silu", attention_bias=False, mlp_bias=True,
            rope_parameters=dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
                                 high_freq_factor=4.0, original_max_position_embeddings=16),
        ),
        seed=11,
    ),
    "qwen2_pair": lambda: build(
        Qwen2ForSequenceClassification,
        Qwen2Config(**common(3), hidden_act="silu",
                    rope_parameters=dict(rope_type="linear", rope_theta=1000.0, factor=2.0)),
        seed=12,
    ),
    "mistral_pair": lambda: build(
        MistralForSequenceClassification,
        MistralConfig(**common(3), hidden_act="silu", sliding_window=4,
                      rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
        seed=13,
    ),
    "qwen3_pair": lambda: build(
        Qwen3ForSequenceClassification,
        Qwen3Config(**{**common(3), "hidden_size": 40}, hidden_act="silu", attention_bias=True,
                    use_sliding_window=True, sliding_window=4, max_window_layers=1,
                    rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
        seed=14,
    ),
    "gemma2_pair": lambda: build(
        Gemma2ForSequenceClassification,
        Gemma2Config(**GEMMA, hidden_activation="gelu_pytorch_tanh", attn_logit_softcapping=3.0,
                     rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
        seed=15,
    ),
    "gemma3_pair": lambda: build(
        Gemma3TextForSequenceClassification,
        Gemma3TextConfig(**GEMMA, hidden_activation="gelu_pytorch_tanh", attention_bias=True,
                         sliding_window_pattern=2,
                         rope_parameters=dict(
                             full_attention=dict(rope_type="linear", rope_theta=100.0, factor=2.0),
                             sliding_attention=dict(rope_type="default", rope_theta=10000.0))),
        seed=16,
    ),
    "gemma_pair": lambda: build(
        GemmaForSequenceClassification,
        GemmaConfig(**{k: v for k, v in GEMMA.items() if k not in ("sliding_window", "query_pre_attn_scalar")},
                    hidden_act="gelu", rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
        seed=17,
    ),
    "gemma3_mm_pair": lambda: build(
        Gemma3ForSequenceClassification,
        Gemma3Config(
            text_config=Gemma3TextConfig(
                **{k: v for k, v in GEMMA.items() if k != "num_labels"},
                hidden_activation="gelu_pytorch_tanh", attention_bias=True, sliding_window_pattern=2,
                rope_parameters=dict(
                    full_attention=dict(rope_type="linear", rope_theta=100.0, factor=2.0),
                    sliding_attention=dict(rope_type="default", rope_theta=10000.0))).to_dict(),
            vision_config=SiglipVisionConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                                             num_attention_heads=2, image_size=28, patch_size=14).to_dict(),
            mm_tokens_per_image=4, image_token_index=96, boi_token_index=95, eoi_token_index=94,
            num_labels=3,
        ),
        seed=18,
    ),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "tests/fixtures/engine"))
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    out = Path(args.out)
    for i, (name, make) in enumerate(CASES.items()):
        if args.only and name not in args.only:
            continue
        model = make()
        inputs, lengths = pair_batch(seed=100 + i)
        labels = torch.tensor([0, 2, 1, 2])
        training_case(
            out, name, model, inputs, lengths, labels,
            loss_cfg={"class_weights": [1.0, 2.0, 0.5], "label_smoothing": 0.1},
            opt_cfg={"lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01},
            max_grad_norm=1.0,
            sched_cfg={"type": "linear", "warmup_steps": 1, "total_steps": 4},
        )
        print(f"wrote {out / name}")


if __name__ == "__main__":
    main()
