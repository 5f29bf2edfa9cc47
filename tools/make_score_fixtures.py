#!/usr/bin/env python3
"""Golden fixtures for single-score and multi-label heads, and a check of what ftune saves.

(a) Writes tests/fixtures/engine/<case>/ in the layout of tools/make_engine_fixtures.py (model/,
    inputs.safetensors, expected.safetensors, case.json; tests/models/golden_fixture.h reads them)
    for heads that are not softmax classifiers, each trained for three AdamW steps by a plain
    PyTorch loop (HF Trainer's decay groups, clipping and schedule, as make_engine_fixtures.py):

      bert_score_bce       BertForSequenceClassification, num_labels 1 (an ms-marco MiniLM-style
                           cross-encoder), BCE with logits on soft targets in [0, 1]
                           (sentence-transformers' CrossEncoder default loss)
      xlmr_score_bce       XLMRobertaForSequenceClassification, num_labels 1 (as BAAI/bge-reranker-*
                           ship), BCE on 0/1 relevance
      bert_regression_mse  BertForSequenceClassification, num_labels 1, problem_type regression,
                           MSE on STS-B-style targets in [0, 5] (what transformers itself computes
                           for it: checked)
      roberta_multilabel_bce  RobertaForSequenceClassification, 3 labels, problem_type
                           multi_label_classification, BCE over every (row, label) (transformers'
                           own loss for it: checked)

    inputs.safetensors also holds `targets` (float32 [B, K]); case.json's "loss" says which loss
    ("kind": bce | mse) and its formula. Everything fp32, CPU, one thread, dropout 0.

(b) --check DIR --data FILE.jsonl --predictions PRED.jsonl: loads the model ftune saved in DIR
    with AutoModelForSequenceClassification and sentence-transformers' CrossEncoder, scores the
    text pairs of FILE.jsonl ({"text", "text_pair"}) and compares both with the "score" of each
    line of PRED.jsonl (ftune predict's output); prints the largest differences and the
    config.json fields (num_labels, id2label, problem_type) transformers read. Exit 1 over 1e-4.

    python tools/make_score_fixtures.py [--out tests/fixtures/engine]
    python tools/make_score_fixtures.py --check RUN/model --data pairs.jsonl --predictions pred.jsonl
"""

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_engine_fixtures as E  # noqa: E402  (the shared builders, batches and writers)

from transformers import (  # noqa: E402
    BertForSequenceClassification,
    RobertaConfig,
    RobertaForSequenceClassification,
    XLMRobertaConfig,
    XLMRobertaForSequenceClassification,
)

FORMULAS = {
    "bce": (
        "PyTorch F.binary_cross_entropy_with_logits(logits, targets, reduction='mean'): "
        "mean over every (row, label) of max(z,0) - z*t + log(1 + exp(-|z|))"
    ),
    "mse": "PyTorch F.mse_loss(logits, targets, reduction='mean'): mean over every (row, label) of (z - t)^2",
}


def score_loss(kind, logits, targets):
    if kind == "bce":
        loss = F.binary_cross_entropy_with_logits(logits, targets)
        z, t = logits.detach().double(), targets.double()
        explicit = (z.clamp(min=0) - z * t + torch.log1p(torch.exp(-z.abs()))).mean()
    else:
        loss = F.mse_loss(logits, targets)
        explicit = ((logits.detach().double() - targets.double()) ** 2).mean()
    assert abs(explicit.item() - loss.item()) <= 1e-6 * max(1.0, abs(loss.item())), (explicit, loss)
    return loss


def train_steps(model, inputs, targets, kind, opt_cfg, max_grad_norm, sched_cfg):
    """E.train_steps with a score loss: STEPS steps on one batch, HF Trainer's AdamW groups."""
    model.train()
    param_names = [n for n, p in model.named_parameters() if p.requires_grad]
    no_decay = E.no_decay_names(model)
    params = dict(model.named_parameters())
    groups = [
        {"params": [params[n] for n in param_names if n not in no_decay], "weight_decay": opt_cfg["weight_decay"]},
        {"params": [params[n] for n in param_names if n in no_decay], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(
        groups, lr=opt_cfg["lr"], betas=tuple(opt_cfg["betas"]), eps=opt_cfg["eps"], foreach=False, fused=False
    )
    scheduler = E.SCHEDULES[sched_cfg["type"]](optimizer, sched_cfg["warmup_steps"], sched_cfg["total_steps"])
    expected, losses, grad_norms, lrs = {}, [], [], []
    for step in range(E.STEPS):
        lrs.append(optimizer.param_groups[0]["lr"])
        logits, hidden = E.forward(model, inputs)
        loss = score_loss(kind, logits, targets)
        if step == 0:
            # transformers' own loss for the head's problem_type, where it has one to compare.
            problem = model.config.problem_type
            if problem in ("regression", "multi_label_classification"):
                hf = model(**inputs, labels=targets.squeeze(-1) if problem == "regression" else targets).loss
                assert abs(hf.item() - loss.item()) <= 1e-6 * max(1.0, abs(loss.item())), (hf, loss)
        loss.backward()
        if step == 0:
            expected["logits"], expected["hidden"], expected["loss"] = logits, hidden, loss
            for n in param_names:
                expected[f"grad.{n}"] = params[n].grad.clone()
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm, foreach=False)
        losses.append(loss.item())
        grad_norms.append(total.item())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    for n in param_names:
        expected[f"step3.{n}"] = params[n].detach().clone()
    expected["losses"] = torch.tensor(losses)
    expected["grad_norms"] = torch.tensor(grad_norms)
    expected["lrs"] = torch.tensor(lrs)
    return expected, losses, grad_norms, lrs, param_names, no_decay


def score_case(out_root, name, model, inputs, lengths, family, targets, kind, opt_cfg, max_grad_norm, sched_cfg,
               note):
    case_dir = E.fresh_dir(out_root / name)
    model.save_pretrained(str(case_dir / "model"), safe_serialization=True)
    saved = json.loads((case_dir / "model" / "config.json").read_text())
    tensors = {k: v.contiguous() for k, v in inputs.items()}
    # labels: 0 for every row (counted; -100 would leave a row out), as ftune stages score rows.
    tensors["labels"] = torch.zeros(targets.shape[0], dtype=torch.int64)
    tensors["targets"] = targets.to(torch.float32).contiguous()
    E.save_file(tensors, str(case_dir / "inputs.safetensors"), metadata={"format": "pt"})

    expected, losses, grad_norms, lrs, param_names, no_decay = train_steps(
        model, inputs, targets, kind, opt_cfg, max_grad_norm, sched_cfg)
    E.write_expected(case_dir, expected)

    reloaded = type(model).from_pretrained(str(case_dir / "model"), dtype=torch.float32, attn_implementation="eager")
    reloaded.train()
    with torch.no_grad():
        again, _ = E.forward(reloaded, inputs)
    # Bit-equal for the 4-row cases; a 1-ulp difference (1.2e-7) seen with 6 rows (another GEMM path).
    diff = (again - expected["logits"].detach()).abs().max().item()
    assert diff <= 1e-6, f"{name}: reload does not reproduce logits ({diff:.2e})"
    assert reloaded.config.num_labels == model.config.num_labels

    noise = [n for n in param_names if n.endswith("attention.self.key.bias")]
    info = {"case": name, **E.model_common(model, model.config)}
    info.update(
        {
            "note": note,
            "saved_config_labels": {k: saved.get(k) for k in ("num_labels", "id2label", "label2id", "problem_type")},
            "batch": E.batch_info(family, lengths),
            "targets": targets.tolist(),
            "loss": {"kind": kind, "class_weights": None, "label_smoothing": 0.0, "reduction": "mean",
                     "computed": "outside the model", "formula": FORMULAS[kind]},
            "optimizer": {"type": "adamw", **opt_cfg, "no_decay": no_decay, "formula": E.FORMULAS["adamw"]},
            "max_grad_norm": max_grad_norm,
            "grad_clip": {"formula": E.FORMULAS["grad_clip"], "clipped": [g > max_grad_norm for g in grad_norms]},
            "schedule": {**sched_cfg, "formula": E.FORMULAS[sched_cfg["type"]]},
            "steps": E.STEPS,
            "losses": losses,
            "grad_norms": grad_norms,
            "lrs": lrs,
            "param_names": param_names,
            "expected": "as make_engine_fixtures.py's training cases",
            "suggested_tolerance": {"rel": 1e-4},
            "analytically_zero_grads": {"names": noise, "why": "as make_engine_fixtures.py"},
        }
    )
    E.write_case_json(case_dir, info)
    print(f"{name}: loss {losses[0]:.6f} -> {losses[-1]:.6f}, logits {expected['logits'].detach().flatten().tolist()[:4]}")


def make_fixtures(out):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    out.mkdir(parents=True, exist_ok=True)
    opt = {"lr": 5e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}
    sched = {"type": "linear", "warmup_steps": 1, "total_steps": 6}

    bert_inputs, bert_lengths = E.pair_batch("bert", E.BERT_SEGMENTS, seed=21)
    bert = E.build(BertForSequenceClassification, E.bert_config(num_labels=1, attn_implementation="eager"), seed=21)
    score_case(out, "bert_score_bce", bert, bert_inputs, bert_lengths, "bert",
               torch.tensor([[1.0], [0.0], [0.3], [0.8]]), "bce", opt, 1.0, sched,
               "a one-logit cross-encoder head (num_labels 1, no problem_type), BCE on soft targets")

    xlmr_inputs, xlmr_lengths = E.pair_batch("roberta", E.ROBERTA_SEGMENTS, seed=22)
    xlmr = E.build(XLMRobertaForSequenceClassification,
                   E.roberta_config(XLMRobertaConfig, "gelu", num_labels=1, attn_implementation="eager"), seed=22)
    score_case(out, "xlmr_score_bce", xlmr, xlmr_inputs, xlmr_lengths, "roberta",
               torch.tensor([[1.0], [0.0], [0.0], [1.0]]), "bce", opt, 1.0, sched,
               "a one-logit XLM-R head as BAAI/bge-reranker-* ship it, BCE on 0/1 relevance")

    reg_inputs, reg_lengths = E.pair_batch("bert", E.BERT_SEGMENTS, seed=23)
    reg = E.build(BertForSequenceClassification,
                  E.bert_config(num_labels=1, problem_type="regression", attn_implementation="eager"), seed=23)
    score_case(out, "bert_regression_mse", reg, reg_inputs, reg_lengths, "bert",
               torch.tensor([[4.2], [0.5], [2.75], [3.0]]), "mse", opt, 1.0, sched,
               "a regression head (problem_type regression), MSE on STS-B-style targets")

    ml_inputs, ml_lengths = E.pair_batch("roberta", E.ROBERTA_SEGMENTS, seed=24)
    ml = E.build(RobertaForSequenceClassification,
                 E.roberta_config(RobertaConfig, "gelu", num_labels=3, problem_type="multi_label_classification",
                                  attn_implementation="eager"), seed=24)
    score_case(out, "roberta_multilabel_bce", ml, ml_inputs, ml_lengths, "roberta",
               torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 1.0]]), "bce", opt, 1.0,
               sched, "a multi-label head (problem_type multi_label_classification), BCE over every (row, label)")


def check(model_dir, data, predictions):
    """(b): transformers' and CrossEncoder's scores of ftune's saved model against ftune predict."""
    from sentence_transformers import CrossEncoder
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    rows = [json.loads(line) for line in Path(data).read_text().splitlines() if line.strip()]
    pred = [json.loads(line) for line in Path(predictions).read_text().splitlines() if line.strip()]
    assert len(rows) == len(pred), (len(rows), len(pred))
    ftune_scores = torch.tensor([p["score"] for p in pred], dtype=torch.float64)
    pairs = [(r["text"], r["text_pair"]) for r in rows]

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        enc = tok([a for a, _ in pairs], [b for _, b in pairs], padding=True, truncation=True, return_tensors="pt")
        hf = model(**enc).logits.squeeze(-1).double()
    # CrossEncoder: its default activation for one label is sigmoid in sentence-transformers 3+ when
    # the model says nothing else; ask for the raw score (identity) to compare logits.
    ce = CrossEncoder(model_dir, device="cpu")
    ce_scores = torch.tensor(ce.predict(pairs, activation_fn=torch.nn.Identity(), batch_size=16), dtype=torch.float64)
    ce_probs = torch.tensor(ce.predict(pairs, batch_size=16), dtype=torch.float64)
    cfg = model.config
    d_hf = (hf - ftune_scores).abs().max().item()
    d_ce = (ce_scores - ftune_scores).abs().max().item()
    d_prob = None
    if "probability" in pred[0]:
        probs = torch.tensor([p["probability"] for p in pred], dtype=torch.float64)
        d_prob = (torch.sigmoid(hf) - probs).abs().max().item()
    report = {
        "model": str(model_dir),
        "rows": len(rows),
        "config": {"num_labels": cfg.num_labels, "id2label": cfg.id2label, "problem_type": cfg.problem_type},
        "max_abs_diff_transformers_vs_ftune_score": d_hf,
        "max_abs_diff_crossencoder_vs_ftune_score": d_ce,
        "max_abs_diff_sigmoid_vs_ftune_probability": d_prob,
        "crossencoder_default_activation_max_abs_diff_vs_sigmoid": (ce_probs - torch.sigmoid(hf)).abs().max().item(),
        "score_range": [ftune_scores.min().item(), ftune_scores.max().item()],
    }
    print(json.dumps(report, indent=2))
    return 0 if max(d_hf, d_ce) <= 1e-4 else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=E.REPO / "tests" / "fixtures" / "engine")
    parser.add_argument("--check", type=Path, help="a model directory ftune saved")
    parser.add_argument("--data", type=Path, help="--check: JSONL text pairs")
    parser.add_argument("--predictions", type=Path, help="--check: ftune predict's output for --data")
    args = parser.parse_args()
    if args.check:
        if not args.data or not args.predictions:
            parser.error("--check needs --data and --predictions")
        sys.exit(check(args.check, args.data, args.predictions))
    make_fixtures(args.out)


if __name__ == "__main__":
    main()
