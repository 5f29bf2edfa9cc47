#!/usr/bin/env python3
"""The GPU kit's trials stage: trials per hour with K trials side by side on one device.

A search of short MiniLM-sized trials (the random BERT of the other stages, the WordNet pairs at
max_length 128, effective batch 32, STEPS optimizer steps and one evaluation on a 5 % split,
learning rate drawn per trial) run by `ftune hpo run` with `trials_per_device: K` for K = 1, 2,
4, 8 (src/hpo/worker_group.h: K workers on the device, each planning with 1/K of its memory):
TRIALS trials per K; per K the wall time, trials per hour, the speedup over K = 1, and the
largest difference of a trial's value from the same trial (same number, same parameters) at
K = 1. A small model leaves a large GPU mostly idle (MiniLM used ~1 % of an H200's FLOPs in the
first kit run); this measures how much of that K workers take back.

With --device cpu (the selfcheck): a tiny BERT, K = 1 and 2, 2 trials of 2 steps.
"""
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kit_models import random_bert  # noqa: E402
from kit_stage import open_stage, run  # noqa: E402

STEPS = int(os.environ.get("FTUNE_KIT_TRIAL_STEPS", "60"))
TRIALS = int(os.environ.get("FTUNE_KIT_TRIALS", "8"))
FEATURE = "trials_per_device"  # the build knows the search key


def trial_values(db):
    """{trial number: value} of the study's complete trials (the SQLite storage's tables)."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT number, value FROM trials WHERE state = 'COMPLETE'").fetchall()
    except sqlite3.Error:
        rows = []
    finally:
        con.close()
    return {n: v for n, v in rows}


def main():
    a, kit, stage, log, on_gpu = open_stage(__doc__)
    if not kit.feature(FEATURE):
        return stage.finish("skipped", "this build has no trials_per_device")
    scratch = tempfile.mkdtemp(prefix="gpu-kit-trials-")
    try:
        root = os.environ.get("FTUNE_KIT_MODELS") or os.path.join(scratch, "models")
        size, ks, trials, steps, length = (("minilm", [1, 2, 4, 8], TRIALS, STEPS, 128) if on_gpu
                                           else ("tiny", [1, 2], 2, 2, 32))
        model = random_bert(size, kit.fixtures, root)
        train = os.path.join(scratch, "train.yaml")
        with open(train, "w") as f:
            f.write("model: {path: %s}\n"
                    "data: {train: %s, max_length: %d, validation_split: 0.05}\n"
                    "training: {effective_batch_size: 32, max_steps: %d, device: %s, seed: 1}\n"
                    "eval: {metric: loss}\n"
                    "checkpoint: {save_best: false}\n"
                    "output: {dir: %s/runs, progress: plain, tensorboard: false}\n" % (
                        model, os.path.join(kit.data, "train.jsonl"), length, steps, a.device,
                        scratch))
        base, ok, heads = None, True, []
        for k in ks:
            if stage.left() < 10:
                stage.row({"K": k, "status": "not run: the stage's time ran out"})
                ok = False
                continue
            db = os.path.join(scratch, "k%d.db" % k)
            search = os.path.join(scratch, "search-k%d.yaml" % k)
            with open(search, "w") as f:
                f.write("study: {name: k%d, direction: minimize, metric: eval.loss}\n"
                        "storage: sqlite:///%s\n"
                        "sampler: {type: random}\n"
                        "space: {training.learning_rate: {type: float, low: 1.0e-5, high: "
                        "3.0e-4, log: true}}\n"
                        "objective: {train_config: %s}\n"
                        "fixed: {output.dir: %s/runs-k%d}\n"
                        "trials_per_device: %d\nseed: 0\n" % (k, db, train, scratch, k, k))
            t0 = time.time()
            rc, text = run([kit.ftune, "hpo", "run", "--config", search, "--trials", str(trials)],
                           log, stage.left() - 5)
            wall = time.time() - t0
            values = trial_values(db)
            if rc != 0 or len(values) < trials:
                tail = [l for l in text.strip().splitlines() if l.strip()][-1:] or [""]
                stage.row({"K": k, "status": "FAIL: %s, %d of %d trials complete: %s" % (
                    "killed at the stage's limit" if rc == 124 else "exit %d" % rc, len(values),
                    trials, tail[0][:300])})
                ok = False
                continue
            per_hour = len(values) / wall * 3600
            if base is None and k == 1:
                base = (per_hour, values)
            same = [abs(v - base[1][n]) for n, v in values.items() if base and n in base[1]]
            stage.row({"K": k, "status": "ok", "trials": len(values), "wall_s": round(wall, 1),
                       "trials_per_hour": round(per_hour),
                       "speedup_over_K1": "%.2fx" % (per_hour / base[0]) if base else "-",
                       "max_value_diff_vs_K1": "%.1e" % max(same) if same else "-"})
            heads.append("K=%d %.0f/h" % (k, per_hour))
        return stage.finish("ok" if ok else "fail", "trials per hour, %s: %s" % (
            size, ", ".join(heads) or "none ran"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
