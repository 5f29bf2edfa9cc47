"""ftune from Python, as a notebook would use it: rows in a DataFrame, a reranker trained
listwise without writing a data file, candidates ranked with the result, and a small
hyperparameter study whose objective is a Python function.

    python3 examples/python_notebook.py --model .cache/models/all-MiniLM-L6-v2 --out runs/nb
    python3 examples/python_notebook.py --model ... --out ... --quick   # seconds, for the tests

The task is the main job's (examples/wordnet_pairs.py: each WordNet example sentence is a query,
its lemma's senses the candidates). Needs `import ftune` (pip install ., or the build tree on
PYTHONPATH) and WordNet (apt-get install wordnet-base); pandas is used when installed (rows
are a list of dicts otherwise: ftune.train takes either).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import ftune
import ftune.hpo

HERE = os.path.dirname(os.path.abspath(__file__))


def wordnet_rows(groups, seed):
    """The main job's WordNet pairs (train, validation) as rows: one dict per candidate sense."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, os.path.join(HERE, "wordnet_pairs.py"), "--out", tmp,
                        "--seed", str(seed), "--max-train-groups", str(groups),
                        "--max-eval-groups", str(max(groups // 4, 20)), "--quiet"], check=True)
        splits = {}
        for split in ("train", "validation"):
            with open(os.path.join(tmp, f"{split}.jsonl")) as f:
                splits[split] = [json.loads(line) for line in f]
    return splits["train"], splits["validation"]


def as_frame(rows):
    try:
        import pandas as pd
    except ImportError:
        return rows  # a list of dicts trains the same
    return pd.DataFrame(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.environ.get("FTUNE_MINILM_DIR"),
                    help="a model directory (default: $FTUNE_MINILM_DIR, all-MiniLM-L6-v2)")
    ap.add_argument("--out", required=True, help="where the runs and the study go")
    ap.add_argument("--quick", action="store_true", help="a few steps each (tests)")
    args = ap.parse_args()
    if not args.model:
        ap.error("--model is required (or set FTUNE_MINILM_DIR)")
    steps, groups, trials = (4, 48, 2) if args.quick else (300, 2000, 6)

    # 1. Rows in memory: a DataFrame (or a list of dicts), never written to a file.
    train_rows, val_rows = wordnet_rows(groups, seed=13)
    train, validation = as_frame(train_rows), as_frame(val_rows)
    print(f"{len(train_rows)} training and {len(val_rows)} validation rows in memory")

    # 2. Train a listwise reranker: each sentence's senses are one group.
    config = {
        "model": {"path": args.model},
        "data": {"max_length": 64, "group_field": "group", "group_size": 3},
        "training": {"loss": "listwise", "max_steps": steps, "effective_batch_size": 8,
                     "learning_rate": 5e-5, "threads": 2, "log_every": max(steps // 4, 1)},
        "eval": {"metric": "group_accuracy", "every_steps": steps},
        "output": {"dir": os.path.join(args.out, "reranker"), "overwrite": True,
                   "progress": "plain", "tensorboard": False},
    }
    run = ftune.train(config, train=train, validation=validation,
                      on_log=lambda line: line["split"] == "validation" and print(
                          f"  step {line['step']}: group accuracy {line['group_accuracy']:.3f}, "
                          f"mrr@10 {line['mrr@10']:.3f}"))
    print(f"trained: {run.status}, best group accuracy {run.best_metric:.3f} -> {run.model_path}")

    # 3. Rank one sentence's candidate senses with the trained model.
    model = ftune.load(run.model_path)
    first = val_rows[0]["group"]
    sentence = val_rows[0]["text"]
    senses = [r["text_pair"] for r in val_rows if r["group"] == first]
    gold = [r["text_pair"] for r in val_rows if r["group"] == first and r["label"] == 1]
    print(f"\n{sentence!r}")
    for rank, (index, score) in enumerate(model.rank(sentence, senses), 1):
        mark = "  <- gold" if senses[index] in gold else ""
        print(f"  {rank}. {score:+.3f}  {senses[index]}{mark}")

    # 4. A small study: the objective is a Python function that trains with the trial's params
    #    and reports each evaluation to the pruner.
    def objective(trial):
        trial_config = dict(config, output={**config["output"],
                                            "dir": os.path.join(args.out, f"trial-{trial.number}")})
        result = ftune.train(trial_config, overrides=trial.params, train=train,
                             validation=validation,
                             on_eval=lambda step, m: trial.report(step, m["group_accuracy"]))
        return result.best_metric

    search = {
        "study": {"name": "notebook", "direction": "maximize"},
        "storage": "sqlite:///" + os.path.abspath(os.path.join(args.out, "study.db")),
        "sampler": {"type": "tpe", "n_startup_trials": 2},
        "seed": 5,
        "space": {"training.learning_rate": {"type": "float", "low": 1e-5, "high": 2e-4,
                                             "log": True},
                  "training.warmup_ratio": {"type": "categorical", "choices": [0.0, 0.1]}},
    }
    study = ftune.hpo.run(search, objective=objective, n_trials=trials)
    print(f"\nstudy: {study.worker}; best trial {study.best_number}: "
          f"group accuracy {study.best_value:.3f} with {study.best_params}")
    for t in study.trials:
        print(f"  trial {t['number']}: {t['state']} {t['value']} {t['params']}")


if __name__ == "__main__":
    main()
