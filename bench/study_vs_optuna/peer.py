#!/usr/bin/env python3
"""The peer of the study benchmark: the same study as a user writes it today, Optuna + HF Trainer.

Optuna (TPE, MedianPruner on the running fold mean, trial.report after each fold, `timeout` as
the budget: no trial starts after it), each trial 5 folds of HF Trainer fine-tuning the same
checkpoint on the same folds as ftune (ftune_folds.py replicates ftune's group k-fold), with the
settings the user's scripts set: fused AdamW, dataloader workers, length grouping (`train_sampling_strategy="group_by_length"` in transformers 5), bf16 where the
device has it (not on this CPU: fp32), TF32 on GPUs, evaluation each epoch and the best epoch's
F1 as the fold's value (ftune reports a fold's best evaluation too), nothing saved. Layer decay,
which Trainer lacks, is what such scripts add by hand: AdamW parameter groups, layer l at
decay^(L - l), the embeddings at decay^(L + 1), pooler and head at 1 (as ftune's src/optim/layer_decay.h).

Writes --out (JSON): every trial's number, state, params, fold values, value and its start and end
times, so compare.py reads both studies the same way. --final PARAMS_JSON instead trains once on
the whole training file with those params and prints the held-out test F1.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import optuna
import torch
from torch.utils.data import Dataset
from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding,
                          Trainer, TrainingArguments)
from transformers.trainer_utils import set_seed

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ftune_folds import group_fold_ids  # noqa: E402


class Pairs(Dataset):
    def __init__(self, rows, tokenizer, max_length):
        enc = tokenizer([r["text"] for r in rows], [r["text_pair"] for r in rows],
                        truncation=True, max_length=max_length)
        self.items = [{"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i],
                       **({"token_type_ids": enc["token_type_ids"][i]}
                          if "token_type_ids" in enc else {}),
                       "labels": int(rows[i]["label"])} for i in range(len(rows))]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def f1_positive(eval_pred):
    logits, labels = eval_pred
    pred = np.argmax(logits, axis=-1)
    tp = int(np.sum((pred == 1) & (labels == 1)))
    fp = int(np.sum((pred == 1) & (labels == 0)))
    fn = int(np.sum((pred == 0) & (labels == 1)))
    return {"f1": 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)}


def layer_decay_groups(model, lr, decay, weight_decay):
    layers = model.config.num_hidden_layers
    groups = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if ".embeddings." in name:
            scale = decay ** (layers + 1)
        elif ".encoder.layer." in name:
            scale = decay ** (layers - int(name.split(".encoder.layer.")[1].split(".")[0]))
        else:
            scale = 1.0
        no_decay = name.endswith(".bias") or "LayerNorm" in name
        key = (scale, no_decay)
        groups.setdefault(key, {"params": [], "lr": lr * scale,
                                "weight_decay": 0.0 if no_decay else weight_decay})
        groups[key]["params"].append(p)
    return list(groups.values())


def train_one(args, params, train_rows, eval_rows, tokenizer, out_dir):
    """Fine-tunes on train_rows; returns the best epoch's F1 on eval_rows."""
    set_seed(args.seed)
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model, num_labels=2, hidden_dropout_prob=params["hidden_dropout"])
    bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    targs = TrainingArguments(
        output_dir=out_dir, num_train_epochs=params["epochs"],
        per_device_train_batch_size=params["batch_size"], per_device_eval_batch_size=64,
        learning_rate=params["learning_rate"], warmup_steps=params["warmup_ratio"],  # v5: a ratio
        weight_decay=params["weight_decay"], label_smoothing_factor=params["label_smoothing"],
        lr_scheduler_type="linear", max_grad_norm=1.0, bf16=bf16,
        tf32=torch.cuda.is_available() or None, train_sampling_strategy="group_by_length",
        dataloader_num_workers=args.workers, save_strategy="no",
        eval_strategy="epoch" if eval_rows else "no",
        logging_strategy="no", report_to=[], seed=args.seed, disable_tqdm=True)
    optimizer = torch.optim.AdamW(
        layer_decay_groups(model, params["learning_rate"], params["layer_decay"],
                           params["weight_decay"]),
        lr=params["learning_rate"], fused=True)  # torch's fused AdamW, on CPU too since 2.4
    collate = DataCollatorWithPadding(tokenizer)
    trainer = Trainer(model=model, args=targs, train_dataset=Pairs(train_rows, tokenizer, args.max_length),
                      eval_dataset=Pairs(eval_rows, tokenizer, args.max_length) if eval_rows else None,
                      data_collator=collate, compute_metrics=f1_positive,
                      optimizers=(optimizer, None))
    trainer.train()
    scores = [e["eval_f1"] for e in trainer.state.log_history if "eval_f1" in e]
    return (max(scores) if scores else None), trainer


def suggest(trial):
    return {
        "learning_rate": trial.suggest_float("learning_rate", 1e-5, 3e-4, log=True),
        "batch_size": trial.suggest_categorical("batch_size", [8, 16, 32]),
        "epochs": trial.suggest_int("epochs", 1, 3),
        "warmup_ratio": trial.suggest_float("warmup_ratio", 0.0, 0.2),
        "weight_decay": trial.suggest_float("weight_decay", 0.0, 0.1),
        "hidden_dropout": trial.suggest_float("hidden_dropout", 0.0, 0.2),
        "layer_decay": trial.suggest_float("layer_decay", 0.7, 1.0),
        "label_smoothing": trial.suggest_float("label_smoothing", 0.0, 0.1),
    }


def read_rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class EitherPruner(optuna.pruners.BasePruner):
    """Prunes when any of its pruners would: how an Optuna user bounds a MedianPruner, whose
    start-up trials it never prunes, by a ThresholdPruner that prunes a collapsed trial at once."""

    def __init__(self, *pruners):
        self.pruners = pruners

    def prune(self, study, trial):
        return any(p.prune(study, trial) for p in self.pruners)


def make_pruner(lower):
    median = optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=0)
    if lower is None:
        return median
    return EitherPruner(optuna.pruners.ThresholdPruner(lower=lower), median)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--train", required=True)
    p.add_argument("--test")
    p.add_argument("--out")
    p.add_argument("--budget-s", type=float, default=3600)
    p.add_argument("--trials", type=int, default=None)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--seed", type=int, default=42, help="training seed (as ftune's training.seed)")
    p.add_argument("--study-seed", type=int, default=0, help="the sampler's seed")
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--scratch", default="/tmp/study_vs_optuna_peer")
    p.add_argument("--final", help="JSON params: train on all of --train, print --test's F1")
    p.add_argument("--lower", type=float, default=None,
                   help="prune a trial whose running fold mean falls below this, start-up trials "
                        "included (Optuna's ThresholdPruner beside the MedianPruner)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    rows = read_rows(args.train)

    if args.final:
        params = json.loads(args.final)
        start = time.time()
        _, trainer = train_one(args, params, rows, None, tokenizer, args.scratch + "/final")
        test = read_rows(args.test)
        out = trainer.predict(Pairs(test, tokenizer, args.max_length))
        f1 = f1_positive((out.predictions, out.label_ids))["f1"]
        print(json.dumps({"test_f1": f1, "seconds": time.time() - start}))
        return

    folds = group_fold_ids([r.get("group") for r in rows], args.folds, args.seed)
    records = []

    def objective(trial):
        params = suggest(trial)
        rec = {"number": trial.number, "params": params, "start_time": time.time(), "folds": {},
               "train_samples": 0}
        records.append(rec)
        values = []
        for k in range(args.folds):
            train_rows = [r for r, f in zip(rows, folds) if f != k]
            eval_rows = [r for r, f in zip(rows, folds) if f == k]
            value, _ = train_one(args, params, train_rows, eval_rows, tokenizer,
                                 f"{args.scratch}/trial-{trial.number}/fold-{k}")
            values.append(value)
            rec["folds"][k] = value
            rec["train_samples"] += len(train_rows) * params["epochs"]  # rows trained, as ftune counts
            trial.report(float(np.mean(values)), step=k)
            if trial.should_prune():
                rec.update(state="PRUNED", end_time=time.time())
                raise optuna.TrialPruned()
        rec.update(state="COMPLETE", value=float(np.mean(values)), end_time=time.time())
        return rec["value"]

    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.TPESampler(seed=args.study_seed,
                                                                 n_startup_trials=5),
        pruner=make_pruner(args.lower))
    started = time.time()
    try:
        study.optimize(objective, n_trials=args.trials, timeout=args.budget_s, catch=(RuntimeError,))
    finally:
        for rec in records:
            rec.setdefault("state", "FAIL")
            rec.setdefault("end_time", time.time())
        with open(args.out + ".tmp", "w") as f:
            json.dump({"engine": "optuna+hf", "started": started, "optuna": optuna.__version__,
                       "torch": torch.__version__, "trials": records}, f, indent=1)
        os.replace(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()
