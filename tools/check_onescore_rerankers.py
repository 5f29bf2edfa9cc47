#!/usr/bin/env python3
"""Dev check (not CI) that one-score rerankers ftune trains on query groups load in transformers and
sentence-transformers' CrossEncoder with ftune's scores (docs/rerankers.md, issue 34).

Gives all-MiniLM-L6-v2 a one-logit head with transformers (num_labels 1, as an ms-marco
cross-encoder or a BGE reranker ships), writes a synthetic grouped task (each query: 1 positive +
4 negatives, a "qid" and a teacher's "teacher" score), then for each of
  listwise     the bge-reranker preset, training.loss auto (listwise: one-score head + groups)
  margin_mse   training.loss margin_mse, data.teacher_field teacher
runs `ftune train` and `ftune predict` on the validation pairs, checks the saved config (one label,
no problem_type) and compares transformers' and CrossEncoder's scores with ftune's
(tools/make_score_fixtures.py --check; exit 1 over 1e-4).

    /work/venv/bin/python tools/check_onescore_rerankers.py [--ftune build/ftune] [--work DIR]
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORDS = "apple river stone cloud music paper garden window silver forest candle mirror bridge".split()


def grouped_rows(groups, first_id, rng):
    rows = []
    for g in range(groups):
        q = " ".join(rng.sample(WORDS, 3))
        qid = f"q{first_id + g}"
        rows.append({"text": q, "text_pair": q.split()[0] + " is good " + " ".join(rng.sample(WORDS, 2)),
                     "label": 1, "qid": qid, "teacher": 4.0})
        for k in range(4):
            rows.append({"text": q, "text_pair": rng.choice(WORDS) + " is bad " + " ".join(rng.sample(WORDS, 2)),
                         "label": 0, "qid": qid, "teacher": -1.0 - 0.5 * k})
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ftune", type=Path, default=REPO / "build" / "ftune")
    parser.add_argument("--minilm", type=Path,
                        default=Path(os.environ.get("FTUNE_MINILM_DIR", REPO / ".cache/models/all-MiniLM-L6-v2")))
    parser.add_argument("--work", type=Path, help="working directory (default: a fresh temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="ftune_onescore_"))
    work.mkdir(parents=True, exist_ok=True)

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    base = work / "onelogit"
    AutoModelForSequenceClassification.from_pretrained(str(args.minilm), num_labels=1).save_pretrained(str(base))
    AutoTokenizer.from_pretrained(str(args.minilm)).save_pretrained(str(base))
    rng = random.Random(0)
    for name, groups, first in (("train", 64, 0), ("val", 16, 1000)):
        with open(work / f"{name}.jsonl", "w") as f:
            for r in grouped_rows(groups, first, rng):
                f.write(json.dumps(r) + "\n")

    runs = {
        "listwise": "preset: bge-reranker\ntraining: {loss: auto, epochs: 3, learning_rate: 2.0e-4}\n",
        "margin_mse": "training: {loss: margin_mse, epochs: 4, learning_rate: 2.0e-4}\n",
    }
    status = 0
    for name, training in runs.items():
        cfg = work / f"{name}.yaml"
        cfg.write_text(
            f"{training}model: {{path: {base}}}\n"
            f"data: {{train: {work / 'train.jsonl'}, validation: {work / 'val.jsonl'}, group_field: qid, "
            f"group_size: 4, max_length: 64, teacher_field: teacher}}\n"
            f"output: {{dir: {work / ('run_' + name)}, progress: plain}}\n")
        # effective_batch_size 8 groups, threads 2, no layer decay (the preset's 0.9 is for 24 layers).
        overrides = ["training.effective_batch_size=8", "training.threads=2", "training.layer_decay=1.0"]
        subprocess.run([str(args.ftune), "train", "--config", str(cfg), *overrides], check=True)
        model = work / f"run_{name}" / "model"
        pred = work / f"pred_{name}.jsonl"
        subprocess.run([str(args.ftune), "predict", "--model", str(model), "--data", str(work / "val.jsonl"),
                        "--output", str(pred)], check=True)
        saved = json.loads((model / "config.json").read_text())
        assert len(saved["id2label"]) == 1 and "problem_type" not in saved, saved
        print(f"== {name}: {model}")
        status |= subprocess.run([sys.executable, str(REPO / "tools" / "make_score_fixtures.py"), "--check",
                                  str(model), "--data", str(work / "val.jsonl"), "--predictions", str(pred)]).returncode
    sys.exit(status)


if __name__ == "__main__":
    main()
