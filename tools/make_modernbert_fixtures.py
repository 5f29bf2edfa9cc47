#!/usr/bin/env python3
"""Golden fixtures of ftune's ModernBERT family (tests/fixtures/engine/modernbert_*), in the format
of tools/make_engine_fixtures.py (whose loss, optimizer, schedule and writing helpers this reuses):
tiny random ModernBertForSequenceClassification models from transformers, a right-padded
'[CLS] a [SEP] b [SEP]' batch with rows longer than the local attention window, the logits, the
final_norm hidden state, the loss, every parameter gradient and the parameters after three AdamW
steps with HF Trainer's decay groups, clipping and a schedule. fp32 on the CPU, eager attention,
all dropout 0, deterministic.

Cases (3 layers, global_attn_every_n_layers 2: layers 0 and 2 global, layer 1 local):
    modernbert_cls   classifier_pooling cls, no biases anywhere but the classifier's (HF's
                     defaults: norm_bias, attention_bias, mlp_bias, classifier_bias all false),
                     local_attention 4 (2 tokens either side), GELU (erf) in the MLP and the head,
                     written with the legacy keys global_rope_theta / local_rope_theta /
                     global_attn_every_n_layers as the published checkpoints' config.json has them
    modernbert_mean  classifier_pooling mean over the real tokens, every bias on, local_attention 6,
                     gelu_pytorch_tanh in the MLP, config.json as transformers 5 writes it
                     (layer_types, rope_parameters per layer type)

    /work/venv-oracle/bin/python tools/make_modernbert_fixtures.py [--out tests/fixtures/engine]
"""
import argparse
import json
import sys
from pathlib import Path

import torch
import transformers
from transformers import ModernBertConfig, ModernBertForSequenceClassification

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_engine_fixtures as eng  # noqa: E402

SIZES = dict(vocab_size=97, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
             intermediate_size=37, max_position_embeddings=64, initializer_range=0.2, norm_eps=1e-5)
IDS = dict(pad=0, unk=1, cls=2, sep=3, mask=4, first_content=5)
NO_DROPOUT = dict(embedding_dropout=0.0, attention_dropout=0.0, mlp_dropout=0.0, classifier_dropout=0.0)
INIT_NOTE = (
    "HF _init_weights (truncated normals of initializer_range, / sqrt(2 L) for the output "
    "projections, hidden^-0.5 for the classifier; the embedding's padding_idx row 0), then every "
    "bias ~ normal(0, 0.1) and every LayerNorm weight ~ 1 + normal(0, 0.1)"
)

CASES = {
    "modernbert_cls": dict(
        config=dict(classifier_pooling="cls", local_attention=4, global_attn_every_n_layers=2,
                    global_rope_theta=160000.0, local_rope_theta=10000.0, hidden_activation="gelu",
                    classifier_activation="gelu", num_labels=3),
        legacy_keys=True, seed=41, batch_seed=51, labels=[0, 2, 1, 2],
        loss_cfg={"class_weights": [1.0, 2.0, 0.5], "label_smoothing": 0.1},
        opt_cfg={"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01},
        max_grad_norm=1.0, sched_cfg={"type": "linear", "warmup_steps": 1, "total_steps": 4},
    ),
    "modernbert_mean": dict(
        config=dict(classifier_pooling="mean", local_attention=6, global_attn_every_n_layers=2,
                    global_rope_theta=1000.0, local_rope_theta=50.0,
                    hidden_activation="gelu_pytorch_tanh", classifier_activation="gelu",
                    norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True,
                    num_labels=2),
        legacy_keys=False, seed=43, batch_seed=52, labels=[1, 0, 0, 1],
        loss_cfg={"class_weights": None, "label_smoothing": 0.0},
        opt_cfg={"lr": 5e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1},
        max_grad_norm=0.5, sched_cfg={"type": "cosine", "warmup_steps": 1, "total_steps": 6},
    ),
}


def pair_batch(seed):
    """Right-padded '[CLS] a [SEP] b [SEP]' rows, real lengths 13, 9, 6, 10 (T = 13)."""
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.full((eng.BATCH, eng.SEQ), IDS["pad"], dtype=torch.int64)
    attention_mask = torch.zeros((eng.BATCH, eng.SEQ), dtype=torch.int64)
    lengths = []
    for row, (len_a, len_b) in enumerate(eng.BERT_SEGMENTS):
        a = torch.randint(IDS["first_content"], SIZES["vocab_size"], (len_a,), generator=gen).tolist()
        b = torch.randint(IDS["first_content"], SIZES["vocab_size"], (len_b,), generator=gen).tolist()
        ids = [IDS["cls"]] + a + [IDS["sep"]] + b + [IDS["sep"]]
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention_mask[row, : len(ids)] = 1
        lengths.append(len(ids))
    return dict(input_ids=input_ids, attention_mask=attention_mask), lengths


def build(config, seed):
    torch.manual_seed(seed)
    model = ModernBertForSequenceClassification(config)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
    return model


def forward(model, inputs):
    """Logits and HF's last_hidden_state (after final_norm), every position."""
    hidden = model.model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).last_hidden_state
    return model(**inputs).logits, hidden


def legacy_config(model_dir, case_config):
    """Rewrites config.json with the keys of the published checkpoints (answerdotai/ModernBERT-*):
    global_attn_every_n_layers and global / local_rope_theta instead of layer_types and
    rope_parameters."""
    path = model_dir / "config.json"
    j = json.loads(path.read_text())
    for k in ("layer_types", "rope_parameters"):
        j.pop(k, None)
    for k in ("global_attn_every_n_layers", "global_rope_theta", "local_rope_theta"):
        j[k] = case_config[k]
    path.write_text(json.dumps(j, indent=2, sort_keys=True) + "\n")


def training_case(out_root, name, case):
    config = ModernBertConfig(**SIZES, **NO_DROPOUT, pad_token_id=IDS["pad"], cls_token_id=IDS["cls"],
                              sep_token_id=IDS["sep"], bos_token_id=IDS["cls"], eos_token_id=IDS["sep"],
                              attn_implementation="eager", **case["config"])
    model = build(config, case["seed"])
    inputs, lengths = pair_batch(case["batch_seed"])
    labels = torch.tensor(case["labels"])
    case_dir = eng.fresh_dir(out_root / name)
    model.save_pretrained(str(case_dir / "model"), safe_serialization=True)
    if case["legacy_keys"]:
        legacy_config(case_dir / "model", case["config"])
    eng.write_inputs(case_dir, {**inputs, "token_type_ids": torch.zeros_like(inputs["input_ids"])}, labels)
    expected, losses, grad_norms, lrs, param_names, no_decay = eng.train_steps(
        name, model, inputs, labels, case["loss_cfg"], case["opt_cfg"], case["max_grad_norm"],
        case["sched_cfg"], forward)
    eng.write_expected(case_dir, expected)

    reloaded = ModernBertForSequenceClassification.from_pretrained(
        str(case_dir / "model"), dtype=torch.float32, attn_implementation="eager")
    assert reloaded.config.layer_types == model.config.layer_types, reloaded.config.layer_types
    with torch.no_grad():
        again, _ = forward(reloaded, inputs)
    assert torch.equal(again, expected["logits"].detach()), f"{name}: reload does not reproduce logits"

    c = model.config
    info = {
        "case": name,
        "model_type": c.model_type,
        "architecture": type(model).__name__,
        "hidden_act": c.hidden_activation,
        "num_labels": c.num_labels,
        "attn_implementation": "eager",
        "dropout": "embedding, attention, mlp and classifier dropout 0.0 (saved so in model/config.json)",
        "init": INIT_NOTE,
        "modernbert": {k: v for k, v in case["config"].items() if k != "num_labels"},
        "layer_types": c.layer_types,
        "rope_parameters": c.rope_parameters,
        "config_keys": "legacy (global_attn_every_n_layers, *_rope_theta)" if case["legacy_keys"]
                       else "transformers 5 (layer_types, rope_parameters)",
        "batch": {
            "batch_size": eng.BATCH, "seq_len": eng.SEQ, "real_lengths": lengths,
            "format": "[CLS] a [SEP] b [SEP]", "padding": "right",
            "special_ids": {k: v for k, v in IDS.items() if k != "first_content"},
            "embedding_padding_idx": "tok_embeddings is nn.Embedding(padding_idx=pad): that row gets no gradient",
            "position_ids": "0..T-1 for every row (padded positions included)",
            "local_window": f"|i - j| <= local_attention // 2 = {c.local_attention // 2}, shorter than every row",
        },
        "loss": {**case["loss_cfg"], "reduction": "mean", "computed": "outside the model",
                 "formula": eng.FORMULAS["loss"]},
        "optimizer": {"type": "adamw", **case["opt_cfg"], "no_decay": no_decay, "formula": eng.FORMULAS["adamw"]},
        "max_grad_norm": case["max_grad_norm"],
        "grad_clip": {"formula": eng.FORMULAS["grad_clip"],
                      "clipped": [g > case["max_grad_norm"] for g in grad_norms]},
        "schedule": {**case["sched_cfg"], "formula": eng.FORMULAS[case["sched_cfg"]["type"]]},
        "steps": eng.STEPS,
        "losses": losses,
        "grad_norms": grad_norms,
        "lrs": lrs,
        "param_names": param_names,
        "generator": {"script": "tools/make_modernbert_fixtures.py",
                      "torch": torch.__version__.split("+")[0], "transformers": transformers.__version__},
    }
    (case_dir / "case.json").write_text(json.dumps(info, indent=2) + "\n")
    return expected


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=eng.REPO / "tests" / "fixtures" / "engine")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    for name, case in CASES.items():
        expected = training_case(args.out, name, case)
        print(f"{name}: loss {expected['loss'].item():.6f}")


if __name__ == "__main__":
    main()
