#!/usr/bin/env python3
"""Compares a fine-tuned word-sense model with the WordNet baselines (standard library only).

Reads the test split (examples/wordnet_pairs.py), `ftune predict` output for it, and the
baselines.json the builder wrote, and prints pair-level metrics (accuracy, precision / recall /
F1 of the positive class, macro-F1) and group accuracy (the candidate with the highest score in
each example is the predicted sense) for the model next to majority class, first sense and
lexical overlap. Exits non-zero if the files do not line up.

    python3 tools/wsd_report.py DATA_DIR/test.jsonl PREDICTIONS.jsonl DATA_DIR/baselines.json
"""
import json
import sys
from collections import defaultdict


def main(test_path, pred_path, baselines_path):
    rows = [json.loads(line) for line in open(test_path, encoding="utf-8")]
    preds = [json.loads(line) for line in open(pred_path, encoding="utf-8")]
    if len(rows) != len(preds):
        sys.exit(f"{pred_path}: {len(preds)} predictions for {len(rows)} test rows")
    tp = fp = fn = tn = 0
    groups = defaultdict(list)
    for row, pred in zip(rows, preds):
        logits = pred["logits"]
        predicted = int(pred["label"] == "1")  # predict's decision (validation threshold)
        gold = row["label"]
        tp += predicted and gold
        fp += predicted and not gold
        fn += (not predicted) and gold
        tn += (not predicted) and (not gold)
        groups[row["group"]].append((logits[1] - logits[0], gold))

    def f1(p, r):
        return 2 * p * r / (p + r) if p + r else 0.0

    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    neg_p = tn / (tn + fn) if tn + fn else 0.0
    neg_r = tn / (tn + fp) if tn + fp else 0.0
    model = {"accuracy": (tp + tn) / len(rows), "precision": precision, "recall": recall,
             "f1": f1(precision, recall), "macro_f1": (f1(precision, recall) + f1(neg_p, neg_r)) / 2,
             "group_accuracy": sum(max(g)[1] == 1 for g in groups.values()) / len(groups)}
    baselines = json.load(open(baselines_path, encoding="utf-8"))["test"]
    table = [("ftune fine-tuned", model)] + [(name, baselines[name]) for name in
                                             ("majority", "first_sense", "lexical_overlap")]
    print(f"test split: {len(rows)} pairs in {len(groups)} groups (chance group accuracy "
          f"{baselines.get('chance_group_accuracy', float('nan')):.3f})")
    cols = ("accuracy", "precision", "recall", "f1", "macro_f1", "group_accuracy")
    print(f"{'':18s}" + "".join(f"{c:>15s}" for c in cols))
    for name, m in table:
        print(f"{name:18s}" + "".join(f"{m.get(c, float('nan')):15.4f}" for c in cols))
    return model


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
