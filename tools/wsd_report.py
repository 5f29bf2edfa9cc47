#!/usr/bin/env python3
"""Compares a fine-tuned word-sense model with the WordNet baselines (standard library only).

Reads the test split (examples/wordnet_pairs.py), `ftune predict` output for it, and the
baselines.json the builder wrote, and prints pair-level metrics (accuracy, precision / recall /
F1 of the positive class, macro-F1) and group accuracy (the candidate with the highest score in
each example is the predicted sense) for the model next to majority class, first sense and
lexical overlap. The model is scored twice:

  threshold   each pair on its own, at predict's decision (the probability threshold training
              chose on validation): a calibrated yes/no per sentence-definition pair;
  one sense   the top-scoring candidate of each sentence is 1, the others 0: the decision rule
              of the first-sense and lexical-overlap baselines (one positive per group), under
              which pair precision = recall = F1 = group accuracy.

The last lines give the margin over the best baseline on group accuracy (with a 95 % interval,
the normal approximation of the binomial over independent sentences) and on pair F1. Exits non-zero if the files
do not line up; --json FILE also writes the numbers.

    python3 tools/wsd_report.py DATA_DIR/test.jsonl PREDICTIONS.jsonl DATA_DIR/baselines.json
"""
import argparse
import json
import math
import sys
from collections import defaultdict

COLUMNS = ("accuracy", "precision", "recall", "f1", "macro_f1", "group_accuracy")
BASELINES = ("majority", "first_sense", "lexical_overlap")


def pair_metrics(decisions, golds):
    """Accuracy, precision / recall / F1 of class 1 and macro-F1 of 0/1 decisions."""
    tp = sum(p and g for p, g in zip(decisions, golds))
    fp = sum(p and not g for p, g in zip(decisions, golds))
    fn = sum(g and not p for p, g in zip(decisions, golds))
    tn = len(golds) - tp - fp - fn

    def f1(p, r):
        return 2 * p * r / (p + r) if p + r else 0.0

    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    neg_p = tn / (tn + fn) if tn + fn else 0.0
    neg_r = tn / (tn + fp) if tn + fp else 0.0
    return {"accuracy": (tp + tn) / len(golds), "precision": precision, "recall": recall,
            "f1": f1(precision, recall),
            "macro_f1": (f1(precision, recall) + f1(neg_p, neg_r)) / 2}


def score(rows, preds, where):
    """(threshold metrics, one-sense metrics, groups) of the model's predictions."""
    if len(rows) != len(preds):
        sys.exit(f"{where}: {len(preds)} predictions for {len(rows)} test rows")
    groups = defaultdict(list)  # group -> [(margin, gold, row index)]
    golds, decisions = [], []
    for i, (row, pred) in enumerate(zip(rows, preds)):
        logits = pred.get("logits")
        if not isinstance(logits, list) or len(logits) != 2 or pred.get("label") not in ("0", "1"):
            sys.exit(f"{where}:{i + 1}: expected a binary prediction with 'label' and 2 'logits'")
        golds.append(row["label"])
        decisions.append(int(pred["label"] == "1"))
        groups[row["group"]].append((logits[1] - logits[0], row["label"], i))
    top = set()
    for candidates in groups.values():
        # Ties go to the first candidate (the lower sense number), as in the baselines.
        top.add(max(candidates, key=lambda c: (c[0], -c[2]))[2])
    hits = sum(golds[i] == 1 for i in top)
    group_accuracy = hits / len(groups)
    threshold = dict(pair_metrics(decisions, golds), group_accuracy=group_accuracy)
    one_sense = dict(pair_metrics([int(i in top) for i in range(len(rows))], golds),
                     group_accuracy=group_accuracy)
    return threshold, one_sense, len(groups)


def interval(p, n):
    """Half-width of the 95 % normal interval of a proportion p over n independent trials."""
    return 1.96 * math.sqrt(p * (1 - p) / n) if n else float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("test"), ap.add_argument("predictions"), ap.add_argument("baselines")
    ap.add_argument("--json", help="also write the metrics to this file")
    args = ap.parse_args(argv)
    with open(args.test, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    with open(args.predictions, encoding="utf-8") as f:
        preds = [json.loads(line) for line in f]
    with open(args.baselines, encoding="utf-8") as f:
        baselines = json.load(f)["test"]
    threshold, one_sense, n_groups = score(rows, preds, args.predictions)
    table = [("ftune, threshold", threshold), ("ftune, one sense", one_sense)] + \
        [(name, baselines[name]) for name in BASELINES]
    print(f"test split: {len(rows)} pairs in {n_groups} groups (chance group accuracy "
          f"{baselines.get('chance_group_accuracy', float('nan')):.3f})")
    print(f"{'':18s}" + "".join(f"{c:>15s}" for c in COLUMNS))
    for name, m in table:
        print(f"{name:18s}" + "".join(f"{m.get(c, float('nan')):15.4f}" for c in COLUMNS))
    best = {c: max(BASELINES, key=lambda b: baselines[b][c]) for c in ("group_accuracy", "f1")}
    margins = {}
    for column, model, label in (("group_accuracy", one_sense, "group accuracy"),
                                 ("f1", threshold, "pair F1 at the threshold")):
        base = baselines[best[column]][column]
        margins[column] = {"model": model[column], "best_baseline": best[column],
                           "baseline": base, "margin": model[column] - base}
        spread = (f" (95 % interval of each over {n_groups} sentences: "
                  f"±{100 * interval(model[column], n_groups):.1f})") if column == "group_accuracy" else ""
        print(f"{label}: {model[column]:.3f} vs {base:.3f} ({best[column]}), "
              f"{100 * (model[column] - base):+.1f} points" + spread)
    result = {"pairs": len(rows), "groups": n_groups, "threshold": threshold,
              "one_sense": one_sense, "margins": margins}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return result


if __name__ == "__main__":
    main()
