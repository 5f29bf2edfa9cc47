#!/usr/bin/env python3
"""The study benchmark's task: sentence / definition matching from the WordNet pairs of
examples/wordnet_pairs.py, made learnable by a few hundred pairs (the word-sense task itself
needs thousands: at 300 sentences no trial of either engine got past the majority class).

For each sentence of the input (a group: its word's senses, the gold one labelled 1), it writes
the gold pair (label 1), one other sense of the same word (label 0, the hard negative, where the
word has one) and the definition of a random other sentence's gold sense (label 0, an easy
negative), all under the sentence's group id, so folds keep a sentence's pairs together. Seeded;
the same input gives the same output.

    make_data.py IN_DIR OUT_DIR [--seed 13]     # IN_DIR/{train,test}.jsonl -> OUT_DIR/...
"""

import argparse
import json
import os
import random


def build(rows, rng):
    groups = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    order = list(groups)
    gold = {g: next(r for r in groups[g] if r["label"] == 1) for g in order}
    out = []
    for g in order:
        pos = gold[g]
        out.append({"text": pos["text"], "text_pair": pos["text_pair"], "label": 1, "group": g})
        others = [r for r in groups[g] if r["label"] == 0]
        if others:
            hard = rng.choice(others)
            out.append({"text": pos["text"], "text_pair": hard["text_pair"], "label": 0, "group": g})
        while True:
            other = gold[rng.choice(order)]
            if other["lemma"] != pos["lemma"]:
                break
        out.append({"text": pos["text"], "text_pair": other["text_pair"], "label": 0, "group": g})
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("inp")
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=13)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for split in ("train", "test"):
        with open(os.path.join(a.inp, f"{split}.jsonl")) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        pairs = build(rows, random.Random(f"{a.seed}:{split}"))
        path = os.path.join(a.out, f"{split}.jsonl")
        with open(path + ".tmp", "w") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in pairs)
        os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
