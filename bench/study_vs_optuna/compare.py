#!/usr/bin/env python3
"""Reads both studies of one benchmark run and writes the comparison (stdlib only).

Inputs: ftune's `hpo export --format json` (its trials and its `cost` block) and peer.py's JSON;
optionally each engine's held-out test F1 (from the final fits run.sh makes). For each engine: the
best study metric (mean validation F1 over the folds) against wall-clock time since the study
started (the peer runs one trial at a time on both cores; ftune as search.yaml says: two trials side
by side, one core each), counted only for trials that ended inside
the budget; the peer's final best; the time each needed to reach it; the ratio; the same in
training rows (epochs x rows over every trial's folds, pruned trials up to where they stopped),
a compute count that a loaded machine does not change. Writes a Markdown
table (--markdown, appended), an SVG of both curves (--svg) and each engine's trials, one line each
(--trials-md: when each started and ended, what it trained, its folds' values and its key settings),
so that a run's results say which trials decided it after its machine is gone.
"""

import argparse
import json
import os


def rows_of(t):
    """Training rows a trial processed: ftune's attribute train_samples, the peer's own count."""
    return (t.get("attrs") or {}).get("train_samples", t.get("train_samples", 0)) or 0


def curve(trials, start, budget_s):
    """[(seconds since start, best so far, trial, training rows of the trials ended by then)] over
    COMPLETE trials that ended in the budget."""
    ended = sorted((t for t in trials if t["end_time"] - start <= budget_s and t["end_time"] > 0),
                   key=lambda t: (t["end_time"], t["number"]))
    out, best, rows = [], None, 0
    for t in ended:
        rows += rows_of(t)
        if t["state"] == "COMPLETE" and t.get("value") is not None and (best is None or t["value"] > best):
            best = t["value"]
            out.append((t["end_time"] - start, best, t["number"], rows))
    return out


def reach(points, target):
    for s, v, n, rows in points:
        if v >= target:
            return s, n, rows
    return None


def counts(trials, start, budget_s):
    inside = [t for t in trials if t["start_time"] - start <= budget_s]
    by = {}
    for t in inside:
        by[t["state"]] = by.get(t["state"], 0) + 1
    return ", ".join(f"{by[k]} {k.lower()}" for k in sorted(by))


def kit_rates(path, model="minilm"):
    """Training samples/s of ftune and of HF Trainer for `model` from a GPU kit report's bench
    stage (bench/results/gpu/*.json): the calibration of the GPU cost estimate."""
    kit = json.load(open(path))
    rates = {}
    for stage in kit.get("stages", []):
        if stage.get("stage") != "bench":
            continue
        for r in stage.get("rows", []):
            if r.get("model") == model and r.get("samples_per_s"):
                rates[r["impl"]] = float(r["samples_per_s"])
    if "ftune" not in rates or "hf-trainer" not in rates:
        raise SystemExit(f"compare.py: {path} has no {model} rows of both ftune and hf-trainer "
                         "in its bench stage")
    return rates


def svg(curves, budget_s, path, target=None):
    """Both best-so-far step curves against minutes; `target` (the peer's final best) as a dashed
    line, which the ratio is measured at."""
    w, h, m = 640, 360, 50
    ys = [v for c in curves.values() for _, v, _, _ in c] or [0, 1]
    lo, hi = min(ys), max(ys)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.01, hi + 0.01
    x = lambda s: m + (w - 2 * m) * s / budget_s
    y = lambda v: h - m - (h - 2 * m) * (v - lo) / (hi - lo)
    colors = {"ftune": "#1f77b4", "optuna+hf": "#d62728"}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<line x1="{m}" y1="{h-m}" x2="{w-m}" y2="{h-m}" stroke="black"/>',
             f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h-m}" stroke="black"/>',
             f'<text x="{w/2}" y="{h-12}" text-anchor="middle">minutes since the study started</text>',
             f'<text x="14" y="{h/2}" transform="rotate(-90 14 {h/2})" text-anchor="middle">best mean validation F1</text>']
    for i in range(5):
        s = budget_s * i / 4
        parts.append(f'<text x="{x(s):.1f}" y="{h-m+16}" text-anchor="middle">{s/60:.0f}</text>')
        v = lo + (hi - lo) * i / 4
        parts.append(f'<text x="{m-4}" y="{y(v)+4:.1f}" text-anchor="end">{v:.3f}</text>')
    for k, (name, c) in enumerate(curves.items()):
        if not c:
            continue
        pts, prev = [], None
        for s, v, _, _ in c:  # a step line: the best holds until the next improvement
            if prev is not None:
                pts.append(f"{x(s):.1f},{y(prev):.1f}")
            pts.append(f"{x(s):.1f},{y(v):.1f}")
            prev = v
        pts.append(f"{x(budget_s):.1f},{y(prev):.1f}")
        color = colors.get(name, "#333")
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{" ".join(pts)}"/>')
        parts.append(f'<text x="{w-m-4}" y="{m+16*k}" text-anchor="end" fill="{color}">{name}</text>')
    if target is not None:
        parts.append(f'<line x1="{m}" y1="{y(target):.1f}" x2="{w-m}" y2="{y(target):.1f}" '
                     f'stroke="#888" stroke-dasharray="4 4"/>')
        parts.append(f'<text x="{m+4}" y="{y(target)-4:.1f}" fill="#888">the peer\'s final best</text>')
    parts.append("</svg>")
    write_whole(path, "\n".join(parts) + "\n")


def write_whole(path, text):
    """Writes text to path through a temporary file: the file is the old one or the new one."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def trial_lines(name, trials, start, budget_s):
    """Markdown rows of one engine's trials in start order: minutes since the study started (start,
    end, length), state, training rows, fold values, value, and the settings that shape a trial's
    cost and outcome (learning rate, batch, epochs); trials that ended past the budget are marked."""
    def setting(t, key):
        ext = t.get("params_external")  # ftune: the dotted keys, as given to the trainer
        if ext is not None:
            return ext.get({"batch_size": "training.effective_batch_size"}.get(key, "training." + key))
        return t["params"].get(key)  # the peer: its own names
    out = []
    for t in sorted(trials, key=lambda t: (t["start_time"], t["number"])):
        if t["start_time"] <= 0:
            continue
        ended = t.get("end_time") or 0
        folds = t.get("fold_values", t.get("folds")) or {}
        vals = " ".join(f"{float(folds[k]):.3f}" for k in sorted(folds, key=int))
        lr = setting(t, "learning_rate")
        value = t.get("value")
        out.append(
            f"| {name} | {t['number']} | {t['state'].lower()}"
            + (" (past the budget)" if ended - start > budget_s else "")
            + f" | {(t['start_time'] - start) / 60:.1f} | "
            + (f"{(ended - start) / 60:.1f} | {(ended - t['start_time']) / 60:.1f}" if ended > 0 else "- | -")
            + f" | {rows_of(t):,} | {'-' if lr is None else f'{float(lr):.2e}'} | {setting(t, 'batch_size')} | "
            f"{setting(t, 'epochs')} | {vals or '-'} | {'-' if value is None else f'{value:.4f}'} |")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ftune", required=True, help="ftune hpo export --format json")
    p.add_argument("--peer", required=True, help="peer.py --out")
    p.add_argument("--budget-s", type=float, required=True)
    p.add_argument("--ftune-test-f1", type=float)
    p.add_argument("--peer-test-f1", type=float)
    p.add_argument("--label", default="")
    p.add_argument("--markdown")
    p.add_argument("--svg")
    p.add_argument("--trials-md", help="write both engines' trials, one line each, to this file")
    p.add_argument("--gpu-kit", help="a GPU kit report (bench/results/gpu/*.json): estimate each "
                   "engine's GPU training time to the peer's best from its rows and the kit's "
                   "samples/s")
    a = p.parse_args()
    ft = json.load(open(a.ftune))
    peer = json.load(open(a.peer))
    ft_start = min(t["start_time"] for t in ft["trials"] if t["start_time"] > 0)
    curves = {"ftune": curve(ft["trials"], ft_start, a.budget_s),
              "optuna+hf": curve(peer["trials"], peer["started"], a.budget_s)}
    peer_best = curves["optuna+hf"][-1] if curves["optuna+hf"] else None
    ft_best = curves["ftune"][-1] if curves["ftune"] else None
    row = {"label": a.label, "budget_min": a.budget_s / 60,
           "ftune_trials": counts(ft["trials"], ft_start, a.budget_s),
           "peer_trials": counts(peer["trials"], peer["started"], a.budget_s),
           "ftune_best": ft_best[1] if ft_best else None,
           "peer_best": peer_best[1] if peer_best else None}
    if peer_best:
        row["peer_time_to_its_best_min"] = peer_best[0] / 60
        r = reach(curves["ftune"], peer_best[1])
        row["ftune_time_to_peer_best_min"] = r[0] / 60 if r else None
        row["ratio"] = (peer_best[0] / r[0]) if r else None
        # The same in training rows: compute that the machine's load does not change.
        row["peer_rows_to_its_best"] = peer_best[3]
        row["ftune_rows_to_peer_best"] = r[2] if r else None
        row["rows_ratio"] = (peer_best[3] / r[2]) if r and r[2] else None
        if a.gpu_kit and r and r[2]:
            # The same study on one GPU: training rows over each engine's measured samples/s
            # (the kit's bench stage; evaluation and start-up left out, both engines alike).
            rates = kit_rates(a.gpu_kit)
            row["gpu_kit"] = os.path.basename(a.gpu_kit)
            row["gpu_peer_min"] = peer_best[3] / rates["hf-trainer"] / 60
            row["gpu_ftune_min"] = r[2] / rates["ftune"] / 60
            row["gpu_ratio"] = row["gpu_peer_min"] / row["gpu_ftune_min"]
    row["ftune_test_f1"], row["peer_test_f1"] = a.ftune_test_f1, a.peer_test_f1
    print(json.dumps(row, indent=1))
    if a.svg:
        svg(curves, a.budget_s, a.svg, peer_best[1] if peer_best else None)
    if a.trials_md:
        lines = ["| engine | trial | state | start (min) | end (min) | minutes | training rows | "
                 "learning rate | batch | epochs | fold values | value |", "|" + "---|" * 12]
        lines += trial_lines("ftune", ft["trials"], ft_start, a.budget_s)
        lines += trial_lines("optuna+hf", peer["trials"], peer["started"], a.budget_s)
        write_whole(a.trials_md, (a.label + "\n\n" if a.label else "") + "\n".join(lines) + "\n")
    if a.markdown:
        fmt = lambda v, f="{:.4f}": "-" if v is None else f.format(v)
        header = ("| run | budget (min) | ftune trials | peer trials | ftune best | peer best | "
                  "peer: min to its best | ftune: min to the peer's best | ratio | "
                  "peer: rows to its best | ftune: rows to the peer's best | rows ratio | "
                  "GPU estimate (kit): peer / ftune min, ratio | test F1 ftune | test F1 peer |")
        old = open(a.markdown).read() if os.path.exists(a.markdown) else ""
        with open(a.markdown, "a") as f:
            if header not in old:  # a new file, or one with an older table: a new table
                f.write(("\n" if old else "") + header + "\n|" + "---|" * 15 + "\n")
            f.write(f"| {a.label} | {a.budget_s/60:.0f} | {row['ftune_trials']} | {row['peer_trials']} | "
                    f"{fmt(row['ftune_best'])} | {fmt(row['peer_best'])} | "
                    f"{fmt(row.get('peer_time_to_its_best_min'), '{:.1f}')} | "
                    f"{fmt(row.get('ftune_time_to_peer_best_min'), '{:.1f}')} | "
                    f"{fmt(row.get('ratio'), '{:.2f}x')} | "
                    f"{fmt(row.get('peer_rows_to_its_best'), '{:,}')} | "
                    f"{fmt(row.get('ftune_rows_to_peer_best'), '{:,}')} | "
                    f"{fmt(row.get('rows_ratio'), '{:.2f}x')} | "
                    + (f"{row['gpu_peer_min']:.2f} / {row['gpu_ftune_min']:.2f}, {row['gpu_ratio']:.2f}x | "
                       if "gpu_ratio" in row else "- | ")
                    + f"{fmt(a.ftune_test_f1)} | "
                    f"{fmt(a.peer_test_f1)} |\n")


if __name__ == "__main__":
    main()
