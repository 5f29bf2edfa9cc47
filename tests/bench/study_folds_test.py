#!/usr/bin/env python3
"""The study benchmark's peer trains on ftune's own folds (bench/study_vs_optuna/ftune_folds.py).

The Python std::mt19937_64 gives the C++ standard's required 10000th value; and on grouped data
(groups of 1 to 4 rows in random sizes, so a different deal of the groups gives different fold
sizes) ftune's `plan` reports, for every fold of 5 and two seeds, a validation part of exactly the
size the Python replica's fold holds. Needs FTUNE_BINARY and FTUNE_MINILM_DIR (the tokenizer);
exits 77 (skipped) without them.
"""

import json
import os
import random
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "study_vs_optuna"))
from ftune_folds import MT19937_64, group_fold_ids  # noqa: E402

BINARY = os.environ.get("FTUNE_BINARY", "")
MINILM = os.environ.get("FTUNE_MINILM_DIR", "")


def main():
    rng = MT19937_64(5489)
    for _ in range(9999):
        rng()
    assert rng() == 9981545732273789042, "mt19937_64 differs from the C++ standard's"
    if not (BINARY and os.path.isfile(BINARY) and MINILM and os.path.isdir(MINILM)):
        print("skipped: FTUNE_BINARY and FTUNE_MINILM_DIR are needed")
        sys.exit(77)
    gen = random.Random(7)
    rows, g = [], 0
    while len(rows) < 300:
        for i in range(gen.randint(1, 4)):
            words = " ".join(gen.choice(["alpha", "beta", "gamma", "delta", "river", "bank"])
                             for _ in range(gen.randint(1, 12)))
            rows.append({"text": words, "text_pair": f"pair {len(rows)}", "label": int(i == 0),
                         "group": f"g{g}"})
        g += 1
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "pairs.jsonl")
        with open(data, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        cfg = os.path.join(tmp, "train.yaml")
        with open(cfg, "w") as f:
            f.write(f"model: {{path: {MINILM}}}\ndata: {{train: {data}, group_field: group, "
                    f"max_length: 32}}\noutput: {{dir: {tmp}/run}}\n")
        for seed in (42, 3):
            folds = group_fold_ids([r.get("group") for r in rows], 5, seed)
            for k in range(5):
                out = subprocess.run([BINARY, "plan", "--config", cfg, "data.folds=5",
                                      f"data.fold={k}", f"training.seed={seed}"],
                                     capture_output=True, text=True)
                assert out.returncode == 0, out.stdout + out.stderr
                m = re.search(r"validation: (\d+) examples .*?([\d.]+) tokens on average",
                              out.stdout + out.stderr)
                assert m, out.stdout + out.stderr
                want = [i for i, f in enumerate(folds) if f == k]
                assert int(m.group(1)) == len(want), (seed, k, m.group(1), len(want))
                print(f"seed {seed} fold {k}: {len(want)} rows, as ftune's")
    print("ok")


if __name__ == "__main__":
    main()
