#!/usr/bin/env python3
"""Golden fixtures for ftune's DeBERTa-v2/v3 family (tests/fixtures/engine/deberta_*).

The same oracle and layout as tools/make_engine_fixtures.py (whose helpers this imports): a tiny
random transformers DebertaV2ForSequenceClassification, a padded text-pair batch, its logits,
last hidden state, loss, every parameter gradient and three AdamW steps (HF Trainer's decay
groups, clipping, an LR schedule), fp32 on CPU, eager, dropout 0. Two bucket settings:

  deberta_v3_pair   DeBERTa-v3's attention: share_att_key, pos_att_type p2c and c2p,
                    position_buckets 4 (log buckets: the rows are longer than the
                    window), max_relative_positions -1 (-> max_position_embeddings), norm_rel_ebd
                    layer_norm, no absolute positions, no token types, pooler_hidden_act gelu
  deberta_v2_pair   the other branches: separate pos_key_proj / pos_query_proj, no buckets with
                    max_relative_positions 6 (distances clamped), no norm on the relative
                    embeddings, absolute positions, two token types, gelu_new, a tanh pooler

HF multiplies the embeddings by the attention mask, so its hidden states at padding positions are
not those of ftune (which leaves padding rows alone: they reach no real token); case.json says
"hidden_rows": "real" and the test compares the real positions of `hidden` only.

    /work/venv-oracle/bin/python tools/make_deberta_fixtures.py [--out tests/fixtures/engine]
"""
import argparse
import json
import sys
from pathlib import Path

import torch
from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_engine_fixtures as eng  # noqa: E402

DEBERTA_COMMON = dict(
    **eng.SIZES, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0,
    pooler_dropout=0.0, cls_dropout=0.0, pad_token_id=0, relative_attention=True,
    attn_implementation="eager",
)

CASES = {
    "deberta_v3_pair": dict(
        config=dict(type_vocab_size=0, position_biased_input=False, share_att_key=True,
                    pos_att_type="p2c|c2p", position_buckets=4, max_relative_positions=-1,
                    norm_rel_ebd="layer_norm", hidden_act="gelu", pooler_hidden_act="gelu",
                    num_labels=3),
        seed=21, batch_seed=31, labels=[0, 2, 1, 2],
        loss_cfg={"class_weights": [1.0, 2.0, 0.5], "label_smoothing": 0.1},
        opt_cfg={"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01},
        max_grad_norm=0.5, sched_cfg={"type": "linear", "warmup_steps": 2, "total_steps": 10},
    ),
    "deberta_v2_pair": dict(
        config=dict(type_vocab_size=2, position_biased_input=True, share_att_key=False,
                    pos_att_type=["c2p", "p2c"], position_buckets=-1, max_relative_positions=6,
                    norm_rel_ebd="none", hidden_act="gelu_new", pooler_hidden_act="tanh",
                    layer_norm_eps=1e-7, num_labels=2),
        seed=23, batch_seed=32, labels=[1, 0, 0, 1],
        loss_cfg={"class_weights": None, "label_smoothing": 0.0},
        opt_cfg={"lr": 5e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1},
        max_grad_norm=1.0, sched_cfg={"type": "cosine", "warmup_steps": 1, "total_steps": 6},
    ),
}


def info_noise(case_dir):
    return json.loads((case_dir / "case.json").read_text())["analytically_zero_grads"]["names"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=eng.REPO / "tests" / "fixtures" / "engine")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    eng.NO_DROPOUT = dict(eng.NO_DROPOUT, pooler_dropout=0.0, cls_dropout=0.0)
    for name, case in CASES.items():
        config = DebertaV2Config(**{**DEBERTA_COMMON, **case["config"]})
        model = eng.build(DebertaV2ForSequenceClassification, config, seed=case["seed"])
        inputs, lengths = eng.pair_batch("bert", eng.BERT_SEGMENTS, seed=case["batch_seed"])
        expected = eng.training_case(
            args.out, name, model, inputs, lengths, "bert", torch.tensor(case["labels"]),
            loss_cfg=case["loss_cfg"], opt_cfg=case["opt_cfg"],
            max_grad_norm=case["max_grad_norm"], sched_cfg=case["sched_cfg"],
            # c2p through a separate pos_key_proj: q_i . b adds the same to every score of row i.
            zero_grad_suffixes=("attention.self.pos_key_proj.bias",),
        )
        # Adam divides each gradient element by its own magnitude (+ eps 1e-8): an element that is
        # small by chance (~1e-8) makes its step-3 value depend on round-off. Seeds are chosen so
        # that none is (exact zeros, e.g. embedding rows of absent tokens, are fine).
        noise = set(info_noise(args.out / name))
        for n, g in expected.items():
            if n.startswith("grad.") and n[5:] not in noise:
                small = ((g.abs() > 0) & (g.abs() < 1e-6 * g.abs().max())).sum().item()
                assert small == 0, f"{name}: {n} has {small} gradient elements near 0; change the seed"
        case_json = args.out / name / "case.json"
        info = json.loads(case_json.read_text())
        info["generator"]["script"] = "tools/make_deberta_fixtures.py"
        info["hidden_rows"] = "real"
        info["deberta"] = {k: v for k, v in case["config"].items() if k != "num_labels"}
        case_json.write_text(json.dumps(info, indent=2) + "\n")
        print(f"{name}: loss {expected['loss'].item():.6f}, grad norm {info['grad_norms'][0]:.4f}")


if __name__ == "__main__":
    main()
