#!/usr/bin/env python3
"""Golden fixtures for ftune's ranking metrics (tests/train/ranking_metrics_test.cc).

Groups of (relevance, score) rows, graded (0..3) and binary, with tied scores, groups without a
relevant row and groups smaller than the cutoffs, and each group's metrics from the reference
libraries:
  - NDCG@k: scikit-learn's ndcg_score (ignore_ties=False: the average over the tied orders),
    and trec_eval's ndcg_cut (pytrec_eval) averaged over every order of the tied scores;
  - MRR@k, MAP, recall@k, group accuracy: trec_eval's recip_rank (cut at k), map, recall_k and
    P_1 (pytrec_eval), each averaged over every order of the tied scores — ftune's tie rule
    (src/train/ranking_metrics.h: the expectation over the tied orders, each equally likely).
Groups without a relevant row are skipped by ftune; here they get null and are left out of the
means. The script asserts that sklearn's and trec_eval's NDCG agree before writing.

The listwise loss (src/ops/listwise_loss.h) against PyTorch: FlagEmbedding's reranker loss
(scores.view(-1, group_size), cross_entropy with target 0: the positive first) on a one-score
head, and on a two-logit head (s = logit[1] - logit[0]) groups of uneven sizes with graded
relevance (soft targets rel / sum rel, a group without a positive left out of the mean), each with
torch autograd's gradient of the logits.

Writes tests/fixtures/ranking/metrics.json:
  {"ks": [...], "groups": [{"id", "relevance", "score", "expected": {name: value|null}}],
   "means": {name: value}, "groups_without_positive": n, "references": {...versions}}

and tests/fixtures/ranking/listwise_loss.json:
  {"cases": [{"name", "num_labels", "logits" (N*K, row-major), "relevance", "offsets", "loss",
              "dlogits"}], "references": {...}}

    /work/venv/bin/python tools/make_ranking_fixtures.py
"""
import importlib.metadata
import itertools
import json
import math
import os

import numpy as np
import pytrec_eval
import sklearn
from sklearn.metrics import ndcg_score

KS = [1, 3, 5, 10]
OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "ranking", "metrics.json")


def make_groups(rng):
    groups = []
    # Graded relevance, scores from a coarse grid so that ties happen.
    for _ in range(14):
        n = int(rng.integers(2, 9))
        rel = rng.integers(0, 4, size=n).tolist()
        score = (rng.integers(-4, 5, size=n) / 2.0).tolist()
        groups.append((rel, score))
    # Binary relevance, one or two positives, continuous scores (no ties) and some ties.
    for i in range(10):
        n = int(rng.integers(2, 13))
        rel = [0] * n
        for p in rng.choice(n, size=1 + (i % 2), replace=False):
            rel[int(p)] = 1
        if i % 3 == 0:
            score = (rng.integers(-2, 3, size=n) * 1.0).tolist()
        else:
            score = rng.normal(size=n).round(6).tolist()
        groups.append((rel, score))
    # Hand-made cases.
    groups.append(([0, 0, 0], [0.5, 0.1, -1.0]))  # no relevant row: skipped
    groups.append(([0, 0], [1.0, 1.0]))  # no relevant row, tied
    groups.append(([1], [0.3]))  # a single row, k > group size
    groups.append(([1, 0], [2.0, 2.0]))  # all tied: a constant scorer
    groups.append(([1, 0, 0, 0, 0, 0, 0, 0], [0.0] * 8))  # positive first, all tied
    groups.append(([0, 2, 1], [1.0, 1.0, 1.0]))  # graded, all tied, k > group size
    groups.append(([0, 0, 1, 1, 0], [3.0, 3.0, 3.0, 1.0, 1.0]))  # relevant rows split by a tie
    groups.append(([3, 0, 1, 0], [-1.0, 2.0, 2.0, 0.0]))
    return groups


def tied_orders(score):
    """Every order of the row indices, by score descending, over all orders of tied scores."""
    blocks = []
    for s in sorted(set(score), reverse=True):
        blocks.append([i for i, v in enumerate(score) if v == s])
    count = math.prod(math.factorial(len(b)) for b in blocks)
    assert count <= 50000, count
    for combo in itertools.product(*[itertools.permutations(b) for b in blocks]):
        yield [i for block in combo for i in block]


def trec_measures():
    cuts = ",".join(str(k) for k in KS)
    return {f"ndcg_cut.{cuts}", f"recall.{cuts}", "recip_rank", "map", "P.1"}


def trec_averages(rel, score):
    """trec_eval's measures averaged over the tied orders (scores replaced by ranks)."""
    qrel = {"q": {f"d{i}": int(r) for i, r in enumerate(rel)}}
    evaluator = pytrec_eval.RelevanceEvaluator(qrel, trec_measures())
    sums = {}
    count = 0
    for order in tied_orders(score):
        run = {"q": {f"d{i}": float(len(order) - pos) for pos, i in enumerate(order)}}
        m = evaluator.evaluate(run)["q"]
        rr = m["recip_rank"]
        rank = round(1 / rr) if rr > 0 else math.inf
        for k in KS:
            add(sums, f"ndcg@{k}", m[f"ndcg_cut_{k}"])
            add(sums, f"recall@{k}", m[f"recall_{k}"])
            add(sums, f"mrr@{k}", rr if rank <= k else 0.0)
        add(sums, "mrr", rr)
        add(sums, "map", m["map"])
        add(sums, "group_accuracy", m["P_1"])
        count += 1
    return {name: v / count for name, v in sums.items()}


def add(sums, name, value):
    sums[name] = sums.get(name, 0.0) + value


def main():
    rng = np.random.default_rng(34)
    groups = make_groups(rng)
    out_groups = []
    means = {}
    without = 0
    for gid, (rel, score) in enumerate(groups):
        entry = {"id": 100 + 7 * gid, "relevance": rel, "score": score}
        if not any(r > 0 for r in rel):
            without += 1
            entry["expected"] = None
            out_groups.append(entry)
            continue
        expected = trec_averages(rel, score)
        for k in KS:
            sk = float(ndcg_score(np.asarray([rel]), np.asarray([score]), k=k)) if len(rel) > 1 \
                else 1.0  # sklearn refuses one-row groups; a lone relevant row has NDCG 1
            assert abs(sk - expected[f"ndcg@{k}"]) < 1e-9, (gid, k, sk, expected[f"ndcg@{k}"])
            expected[f"ndcg@{k}"] = sk
            expected[f"sklearn_ndcg@{k}"] = sk
        entry["expected"] = expected
        out_groups.append(entry)
        for name, v in expected.items():
            means.setdefault(name, []).append(v)
    result = {
        "ks": KS,
        "groups": out_groups,
        "means": {name: float(np.mean(v)) for name, v in means.items()},
        "groups_without_positive": without,
        "references": {"scikit-learn": sklearn.__version__,
                       "pytrec-eval-terrier": importlib.metadata.version("pytrec-eval-terrier"),
                       "numpy": np.__version__},
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(json.dumps(result["means"], indent=1))


def listwise_cases():
    import torch
    import torch.nn.functional as F
    torch.manual_seed(34)
    cases = []
    # FlagEmbedding: 4 groups of train_group_size 8, one logit, the positive first.
    G, gs = 4, 8
    logits = (torch.randn(G * gs, 1, dtype=torch.float64) * 2).requires_grad_()
    scores = logits.view(-1, gs)
    loss = F.cross_entropy(scores, torch.zeros(G, dtype=torch.long))
    loss.backward()
    rel = [1.0 if i % gs == 0 else 0.0 for i in range(G * gs)]
    cases.append({"name": "flagembedding_one_score", "num_labels": 1,
                  "logits": logits.detach().view(-1).tolist(), "relevance": rel,
                  "offsets": [g * gs for g in range(G + 1)], "loss": loss.item(),
                  "dlogits": logits.grad.view(-1).tolist()})
    # Two logits, uneven groups, graded relevance, one group without a positive.
    sizes = [3, 5, 1, 4, 6]
    rels = [[2, 0, 1], [0, 0, 1, 0, 0], [1], [0, 0, 0, 0], [0, 3, 0, 1, 0, 1]]
    N = sum(sizes)
    logits = (torch.randn(N, 2, dtype=torch.float64) * 1.5).requires_grad_()
    s = logits[:, 1] - logits[:, 0]
    terms = []
    start = 0
    for size, rel in zip(sizes, rels):
        r = torch.tensor(rel, dtype=torch.float64)
        if r.sum() > 0:
            terms.append(F.cross_entropy(s[start:start + size].view(1, -1), (r / r.sum()).view(1, -1)))
        start += size
    loss = torch.stack(terms).mean()
    loss.backward()
    offsets = [0]
    for size in sizes:
        offsets.append(offsets[-1] + size)
    cases.append({"name": "two_logits_graded_uneven", "num_labels": 2,
                  "logits": logits.detach().view(-1).tolist(),
                  "relevance": [float(x) for rel in rels for x in rel], "offsets": offsets,
                  "loss": loss.item(), "dlogits": logits.grad.view(-1).tolist()})
    out = os.path.join(os.path.dirname(OUT), "listwise_loss.json")
    with open(out, "w") as f:
        json.dump({"cases": cases, "references": {"torch": torch.__version__}}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
    listwise_cases()
