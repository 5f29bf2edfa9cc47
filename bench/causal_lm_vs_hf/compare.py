#!/usr/bin/env python3
"""Side by side: ftune's run (WORK/ftune) and the transformers + PEFT peer's (WORK/hf, and any
WORK/hf_init*: the peer again with another LoRA init, the spread that init alone gives). Prints
the training loss per logged step (and its mean over windows of --window steps), the validation
loss at each evaluation (step 0: the untuned model), the held-out candidate accuracy of the
untuned and the tuned model by each engine, and the wall times; writes WORK/compare.json.

    python3 bench/causal_lm_vs_hf/compare.py --work WORK --data DATA_DIR [--window 10]
"""
import argparse
import glob
import json
import math
import os


def jsonl(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def accuracy(scores_path, test):
    scores = jsonl(scores_path)
    assert len(scores) == len(test), (scores_path, len(scores), len(test))
    right = sum(s["prediction"] == t["candidates"][t["answer"]] for s, t in zip(scores, test))
    return right / len(test)


def curves(metrics, first_validation=None):
    train = {m["step"]: m["loss"] for m in metrics if m.get("split", "train") == "train"}
    valid = {m["step"]: m["loss"] for m in metrics if m.get("split") == "validation"}
    if first_validation is not None:
        valid.setdefault(0, first_validation)
    return train, valid


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--batch", type=int, default=8, help="rows per step (every step full)")
    ap.add_argument("--exclude-steps", type=int, nargs="*", default=[],
                    help="steps left out of the per-step time (e.g. ones another job disturbed)")
    a = ap.parse_args()
    W = a.work
    test = jsonl(os.path.join(a.data, "test.jsonl"))
    ft_train, ft_valid = curves(jsonl(os.path.join(W, "ftune/run/metrics.jsonl")),
                                json.load(open(os.path.join(W, "ftune/eval_untuned.json")))["loss"])
    ft_times = json.load(open(os.path.join(W, "ftune/times.json")))
    ft_eval_tuned = json.load(open(os.path.join(W, "ftune/eval_tuned.json")))
    peers = {"hf": os.path.join(W, "hf")}
    for d in sorted(glob.glob(os.path.join(W, "hf_init*"))):
        if os.path.exists(os.path.join(d, "metrics.jsonl")):  # finished or not (partial curves)
            peers[os.path.basename(d)] = d
    hf = {}
    for name, d in peers.items():
        t, v = curves(jsonl(os.path.join(d, "metrics.jsonl")))
        summary = os.path.join(d, "summary.json")
        hf[name] = {"train": t, "valid": v,
                    "summary": json.load(open(summary)) if os.path.exists(summary) else {}}
    names = list(hf)
    steps = sorted(ft_train)
    out = {"ftune": {}, "peers": {}}

    print(f"training loss per step (batch mean over its completion tokens); window = {a.window} steps")
    print(f"{'step':>5} {'ftune':>9} " + " ".join(f"{n:>13}" for n in names) + f" {'ftune-hf':>9}")
    for s in steps:
        if s <= 3 or s % a.window == 0:
            row = [hf[n]["train"].get(s, math.nan) for n in names]
            print(f"{s:>5} {ft_train[s]:9.4f} " + " ".join(f"{v:13.4f}" for v in row) +
                  f" {ft_train[s] - row[0]:+9.4f}")
    print("\nper-step training loss, |ftune - peer| over the steps both logged")
    for n in names:
        common = [s for s in steps if s in hf[n]["train"]]
        if not common:
            continue
        d = [abs(ft_train[s] - hf[n]["train"][s]) for s in common]
        worst = max(range(len(d)), key=lambda i: d[i])
        mean_ft = sum(ft_train[s] for s in common) / len(common)
        print(f"  {n:<13} {len(common):3d} steps: mean {sum(d) / len(d):.4f}, worst {d[worst]:.4f} "
              f"(step {common[worst]}), mean loss {mean_ft:.4f}")
        out.setdefault("per_step_abs_diff", {})[n] = {"steps": len(common), "mean": sum(d) / len(d),
                                                      "worst": d[worst]}
    print(f"\nmean training loss over windows of {a.window} steps")
    windows = []
    for lo in range(1, steps[-1] + 1, a.window):
        hi = min(lo + a.window - 1, steps[-1])
        f = sum(ft_train[s] for s in range(lo, hi + 1)) / (hi - lo + 1)
        h = [sum(hf[n]["train"].get(s, math.nan) for s in range(lo, hi + 1)) / (hi - lo + 1)
             for n in names]
        windows.append({"steps": [lo, hi], "ftune": f, **{n: v for n, v in zip(names, h)}})
        print(f"{lo:>3}-{hi:<3} {f:9.4f} " + " ".join(f"{v:13.4f}" for v in h) + f" {f - h[0]:+9.4f}")
    print("\nvalidation loss per completion token (step 0: the untuned model)")
    vsteps = sorted(ft_valid)
    for s in vsteps:
        row = [hf[n]["valid"].get(s, math.nan) for n in names]
        print(f"{s:>5} {ft_valid[s]:9.4f} " + " ".join(f"{v:13.4f}" for v in row) +
              f" {ft_valid[s] - row[0]:+9.4f}")
    last = vsteps[-1]
    print(f"ftune eval on the published model: loss {ft_eval_tuned['loss']:.6f} "
          f"(the run's last validation line: {ft_valid[last]:.6f})")

    ft_untuned = accuracy(os.path.join(W, "ftune/scores_untuned.jsonl"), test)
    ft_tuned = accuracy(os.path.join(W, "ftune/scores_tuned.jsonl"), test)
    print(f"\nheld-out candidate accuracy ({len(test)} rows, {len(test[0]['candidates'])} "
          f"candidates each, chance {1 / len(test[0]['candidates']):.2f})")
    print(f"  {'ftune':<13} untuned {ft_untuned:.4f}  tuned {ft_tuned:.4f}")
    for n in names:
        s = hf[n]["summary"]
        print(f"  {n:<13} untuned {s.get('untuned_accuracy', math.nan):.4f}  "
              f"tuned {s.get('tuned_accuracy', math.nan):.4f}")
    # Untuned scoring agreement: both engines score the same model; their log-likelihoods agree.
    ft_u = jsonl(os.path.join(W, "ftune/scores_untuned.jsonl"))
    hf_u_path = os.path.join(peers["hf"], "scores_untuned.jsonl")
    if os.path.exists(hf_u_path):
        hf_u = jsonl(hf_u_path)
        worst = max(abs(x - y) for f, h in zip(ft_u, hf_u)
                    for x, y in zip(f["log_likelihoods"], h["log_likelihoods"]))
        print(f"  untuned log-likelihoods, ftune vs transformers: worst |difference| {worst:.2e}")
        out["untuned_loglik_worst_abs_diff"] = worst

    hs = hf["hf"]["summary"]
    print("\nwall time (seconds; training includes its evaluations)")
    print(f"  ftune train {ft_times['train_seconds']:.1f} (process: load, tokenize, {len(vsteps) - 1}"
          f" evaluations, checkpoints, save adapter + merged model)")
    print(f"  hf    train {hs['train_seconds']:.1f} (loop with {len(vsteps) - 1} evaluations; "
          f"model load before it, not counted)")
    print(f"  ratio hf / ftune: {hs['train_seconds'] / ft_times['train_seconds']:.2f}")
    print(f"  candidate scoring of {len(test)} rows: ftune {ft_times['untuned_scoring_seconds']:.1f} /"
          f" {ft_times['tuned_scoring_seconds']:.1f} (process), hf {hs.get('untuned_scoring_seconds', math.nan):.1f}"
          f" / {hs['tuned_scoring_seconds']:.1f}")
    # Per-step times over the same steps (the same batches): ftune's from each step's logged
    # samples/s (log_every 1), the peer's from its cumulative clock; the steps right after an
    # evaluation, step 1 (the peer wraps the model in PEFT) and --exclude-steps left out.
    ft_lines = {m["step"]: m for m in jsonl(os.path.join(W, "ftune/run/metrics.jsonl"))
                if m.get("split") == "train"}
    hf_lines = {m["step"]: m for m in jsonl(os.path.join(peers["hf"], "metrics.jsonl"))
                if "split" not in m}
    evals = set(hf["hf"]["valid"])
    skip = {1} | {e + 1 for e in evals} | set(a.exclude_steps)
    same = [s for s in sorted(ft_lines) if s not in skip and s in hf_lines and s - 1 in hf_lines]
    ft_step = sum(a.batch / ft_lines[s]["samples_per_s"] for s in same)  # rows / (rows / s)
    hf_step = sum(hf_lines[s]["seconds"] - hf_lines[s - 1]["seconds"] for s in same)
    print(f"  per-step time over the same {len(same)} steps (no evaluation, no load of the model): "
          f"ftune {ft_step / len(same):.2f} s, hf {hf_step / len(same):.2f} s, ratio hf / ftune "
          f"{hf_step / ft_step:.2f}")
    out["step_time"] = {"steps": same, "ftune_seconds": ft_step, "hf_seconds": hf_step,
                        "ratio": hf_step / ft_step}
    # The timing pairs (run.sh): steps 2-20 of 20, no evaluation, back to back.
    for t in sorted(glob.glob(os.path.join(W, "timing*"))):
        try:
            f = {m["step"]: a.batch / m["samples_per_s"]
                 for m in jsonl(os.path.join(t, "ftune/metrics.jsonl")) if m.get("split") == "train"}
            h = {m["step"]: m["seconds"] for m in jsonl(os.path.join(t, "hf/metrics.jsonl"))
                 if "split" not in m}
        except FileNotFoundError:
            continue
        ss = [s for s in range(2, 21) if s in f and s in h and s - 1 in h]
        fs, hs = sum(f[s] for s in ss), sum(h[s] - h[s - 1] for s in ss)
        load = open(os.path.join(t, "load.txt")).read().split("load average:")
        loads = " / ".join(x.split(",")[0].strip() for x in load[1:])
        print(f"  {os.path.basename(t)} (load {loads}): ftune {fs / len(ss):.2f} s/step, "
              f"hf {hs / len(ss):.2f} s/step, ratio hf / ftune {hs / fs:.2f}")
        out.setdefault("timing_pairs", {})[os.path.basename(t)] = {
            "ftune_s_per_step": fs / len(ss), "hf_s_per_step": hs / len(ss), "load": loads}
    out["ftune"] = {"train": ft_train, "validation": ft_valid, "eval_tuned": ft_eval_tuned["loss"],
                    "untuned_accuracy": ft_untuned, "tuned_accuracy": ft_tuned, "times": ft_times}
    out["peers"] = {n: {"train": hf[n]["train"], "validation": hf[n]["valid"],
                        "summary": hf[n]["summary"]} for n in names}
    out["windows"] = windows
    with open(os.path.join(W, "compare.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
