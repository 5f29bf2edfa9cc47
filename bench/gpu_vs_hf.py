#!/usr/bin/env python3
"""ftune vs PyTorch + HF Trainer with every hand optimisation on (bench/hf_peer_train.py), one run
side by side per (model, precision): BERT-base (random init, written once with a fixed seed and
loaded by both) and all-MiniLM-L6-v2 (pretrained), on the same data (the WordNet gloss pairs of
examples/wordnet_pairs.py), max_length, effective batch, steps, schedule, warm-up, weight decay,
clipping and seed. Prints a table: model, impl, precision, samples/s, real tokens/s, MFU, peak
memory, ftune/HF samples/s ratio; writes bench/results/gpu_vs_hf.md on a GPU (a --device cpu smoke
run writes bench/results/gpu_vs_hf_cpu_smoke.md, labelled as such). On the project's GPU machine
the GPU kit runs it (tools/gpu_kit.sh: BERT-base and MiniLM-sized with random weights, --model);
where a build and the data are at hand:

  python3 bench/gpu_vs_hf.py --ftune build/ftune [--steps N] [--device cpu --threads 2]

Timing, both sides: the first --timing-warmup optimizer steps are left out (torch.compile compiles
there; ftune's first steps pick cuBLASLt algorithms); samples/s and real tokens/s are over the
remaining steps. ftune's come from summary.json (train_seconds, samples, real tokens: step time,
evaluation and checkpoints excluded) minus its first metrics.jsonl window (log_every = the timing
warm-up). MFU, both sides: flops_per_sample (ftune's formula, src/train/flops.h, padded tokens)
x samples/s over the peak of the GPU for the row's precision in src/train/gpu_peak_flops.json.
Peak memory: ftune's peak_device_bytes (its allocations: arena, workspace) vs torch's
max_memory_allocated; the reserved / measured figures are in the JSON lines.

Other families and settings (the GPU kit's families stage, tools/gpu_kit/kit_families.py, drives
ftune_row and hf_row with them): --model NAME=DIR takes any HF classifier directory, --peers picks
the HF variants (default: HF Trainer as users run it, torch.compile on CUDA; eager: no compile;
compile: with it), --ftune-set KEY=VALUE adds `ftune train` overrides (peft.*, gradient
checkpointing) and --hf-arg the peer's matching switches; the ftune/HF ratio is given against each
peer. MFU needs a FLOP formula for the model: ftune's own (summary.json) on its rows, the BERT
formula on the peer's, which a non-BERT peer row leaves empty.
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from hf_peer_train import peak_flops  # noqa: E402  (the one peak table, ftune's)

DATA = os.path.join(ROOT, ".cache", "data", "wordnet-3k")
MINILM = os.path.join(ROOT, ".cache", "models", "all-MiniLM-L6-v2")
PEER = os.path.join(ROOT, "bench", "hf_peer_train.py")


# The HF variants: (impl name, hf_peer_train.py switches). "default" is the peer as users run it
# (torch.compile on CUDA, off on the CPU).
PEERS = {"default": ("hf-trainer", []), "eager": ("hf-eager", ["--no-compile"]),
         "compile": ("hf-compile", ["--compile"])}


def run(cmd, log, env=None, timeout=None):
    """Runs cmd, output appended to log; returns (exit code, output). Past `timeout` seconds the
    command and everything it started (DataLoader workers, compile workers) are killed: 124."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         start_new_session=True, errors="replace")
    try:
        out, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        rc = 124
        out += "\n[killed after %.0f s]" % timeout
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + out + "\n")
    return rc, out


def failure(rc, out):
    """A failed run's error: its exit status and last line, or that it was killed."""
    if rc == 124:
        return "killed at its time limit"
    return "exit %d: %s" % (rc, out.strip().splitlines()[-1] if out.strip() else "")


def gpu_paths_line(paths):
    """The nonzero counters of summary.json gpu_paths, one short line (which kernels ran)."""
    if not isinstance(paths, dict):
        return None
    parts = []
    for group, counts in paths.items():
        if isinstance(counts, dict):
            parts += ["%s.%s %s" % (group, k, v if isinstance(v, int) else "%.2f" % v)
                      for k, v in counts.items() if isinstance(v, (int, float)) and v]
    return ", ".join(parts) or None


def gpu_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True)
        name, driver = [x.strip() for x in out.stdout.splitlines()[0].split(",")]
        return name, driver
    except (OSError, subprocess.CalledProcessError, IndexError, ValueError):
        return "", ""


def ftune_config(path, model, a, out_dir):
    with open(path, "w") as f:
        f.write("model:\n  path: %s\n" % model)
        f.write("data:\n  train: %s\n" % a.train)
        if a.validation:
            f.write("  validation: %s\n" % a.validation)
        f.write("  max_length: %d\n" % a.max_length)
        f.write("training:\n")
        if a.steps > 0:
            f.write("  max_steps: %d\n" % a.steps)
        else:
            f.write("  epochs: %d\n" % a.epochs)
        f.write("  effective_batch_size: %d\n  learning_rate: %g\n  warmup_ratio: 0.1\n"
                "  weight_decay: 0.01\n  schedule: linear\n  max_grad_norm: 1.0\n  seed: 42\n"
                "  log_every: %d\n" % (a.batch, a.lr, max(a.timing_warmup, 1)))
        if a.threads:
            f.write("  threads: %d\n" % a.threads)
        f.write("output:\n  dir: %s\n  overwrite: true\n  progress: plain\n  tensorboard: false\n"
                % out_dir)


def ftune_row(a, name, model, precision, work, log):
    """One `ftune train` run; returns the row (error set when it failed)."""
    out_dir = os.path.join(work, "ftune-%s-%s" % (name, precision))
    config = os.path.join(work, "ftune-%s.yaml" % name)
    ftune_config(config, model, a, out_dir)
    base = [a.ftune, "train", "--config", config, "training.device=" + a.device]
    rc, out = run(base + ["training.precision=" + precision] + a.ftune_set, log,
                  timeout=a.timeout or None)
    note = ""
    if rc != 0 and "training.precision" in out:
        # This ftune has no training.precision yet (it trains in fp32 only).
        if precision != "fp32":
            return {"model": name, "impl": "ftune", "precision": precision,
                    "error": "this ftune has no training.precision"}
        rc, out = run(base, log, timeout=a.timeout or None)
        note = "no training.precision: fp32 by default"
    if rc != 0:
        return {"model": name, "impl": "ftune", "precision": precision, "error": failure(rc, out)}
    with open(os.path.join(out_dir, "summary.json")) as f:
        s = json.load(f)
    first = None
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if m.get("split") == "train":
                first = m
                break
    secs, samples, tokens = s["train_seconds"], s["train_samples"], s["train_real_tokens"]
    warm = 0
    if first and a.timing_warmup > 0 and first["step"] == a.timing_warmup and s["steps"] > warm:
        warm = first["step"]
        w_samples = warm * s["effective_batch"]
        w_secs = w_samples / first["samples_per_s"]
        w_tokens = first["tokens_per_s"] * w_secs
        if secs - w_secs > 0 and s["steps"] > warm:
            secs, samples, tokens = secs - w_secs, samples - w_samples, tokens - w_tokens
        else:
            warm = 0
    mfu_precision = s.get("mfu_precision", "fp32")
    tf32 = mfu_precision == "tf32"
    row = {"model": name, "impl": "ftune", "precision": s.get("precision", precision) +
           ("+tf32" if tf32 else ""), "steps": s["steps"], "timing_warmup_steps": warm,
           "samples_per_s": samples / secs, "tokens_per_s": tokens / secs,
           "flops_per_sample": s.get("flops_per_sample"),
           "flops_per_sample_real": s.get("flops_per_sample_real"),
           "peak_memory_bytes": s.get("peak_device_bytes", s.get("peak_rss_bytes")),
           "measured_device_bytes": s.get("memory", {}).get("measured_device_bytes"),
           "planned_total_bytes": s.get("memory", {}).get("planned_total_bytes"),
           "ftune_mfu_whole_run": s.get("mfu"), "micro_batch": s.get("micro_batch"),
           "gradient_accumulation": s.get("gradient_accumulation"),
           "eval_accuracy": (s.get("final_eval") or {}).get("accuracy"),
           "compile_seconds": None, "note": note, "gpu_paths": gpu_paths_line(s.get("gpu_paths")),
           "math": mfu_precision if s.get("precision", precision) == "fp32" else s.get("precision")}
    shutil.rmtree(os.path.join(out_dir, "checkpoints"), ignore_errors=True)
    shutil.rmtree(os.path.join(out_dir, "model"), ignore_errors=True)
    return row


def hf_row(a, name, model, precision, work, log, peer="default"):
    """One hf_peer_train.py run of the HF variant `peer` (PEERS); returns the row."""
    impl, switches = PEERS[peer]
    out_dir = os.path.join(work, "%s-%s-%s" % (impl, name, precision))
    cmd = [sys.executable, PEER, "--model", model, "--name", name, "--train", a.train,
           "--max-length", str(a.max_length), "--batch", str(a.batch), "--lr", str(a.lr),
           "--timing-warmup", str(a.timing_warmup), "--device", a.device.split(":")[0],
           "--output-dir", out_dir]
    cmd += ["--validation", a.validation] if a.validation else ["--validation", ""]
    cmd += ["--max-steps", str(a.steps)] if a.steps > 0 else ["--epochs", str(a.epochs)]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    if a.eval_limit:
        cmd += ["--eval-limit", str(a.eval_limit)]
    if precision == "fp32":
        cmd += ["--no-bf16"]  # TF32 stays on (on CUDA), as users run fp32
    cmd += a.hf_arg + switches
    env = dict(os.environ)
    if a.device.startswith("cuda") and ":" in a.device:
        env["CUDA_VISIBLE_DEVICES"] = a.device.split(":")[1]
    rc, out = run(cmd, log, env, timeout=a.timeout or None)
    shutil.rmtree(out_dir, ignore_errors=True)
    lines = [l for l in out.splitlines() if l.startswith("{\"impl\"")]
    if rc != 0 or not lines:
        return {"model": name, "impl": impl, "precision": precision, "error": failure(rc, out)}
    j = json.loads(lines[-1])
    return {"model": name, "impl": impl,
            "precision": j["precision"] + ("+tf32" if j["tf32"] and j["precision"] == "fp32" else ""),
            "steps": j["steps"], "timing_warmup_steps": j["timing_warmup_steps"],
            "samples_per_s": j["samples_per_s"], "tokens_per_s": j["tokens_per_s"],
            "flops_per_sample": j["flops_per_sample"],
            "flops_per_sample_real": j["flops_per_sample_real"],
            "peak_memory_bytes": j["peak_memory_allocated_bytes"] or j["peak_host_rss_bytes"],
            "reserved_bytes": j["peak_memory_reserved_bytes"],
            "eval_accuracy": j["eval_accuracy"], "compile_seconds": j["compile_seconds"],
            "warmup_excess_seconds": j["warmup_excess_seconds"],
            "math": ("tf32" if j["tf32"] else "fp32") if j["precision"] == "fp32" else j["precision"],
            "options": {k: j.get(k) for k in ("attn", "optim", "compile", "dataloader_workers",
                                              "pin_memory", "group_by_length", "dynamic_padding",
                                              "lora_r", "base_dtype", "gradient_checkpointing",
                                              "trainable_params", "what_ran")
                        if j.get(k) is not None},
            "versions": {k: j[k] for k in ("torch", "transformers", "peft") if j.get(k)}}


def fmt_bytes(b):
    return "-" if not b else "%.2f GiB" % (b / 2**30) if b >= 2**30 else "%.0f MiB" % (b / 2**20)


def table(rows, gpu):
    head = "| model | impl | precision | samples/s | real tokens/s | MFU | peak memory | ftune/HF | eval acc |"
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        if "error" in r:
            lines.append("| %s | %s | %s | failed: %s | | | | | |" %
                         (r["model"], r["impl"], r["precision"], r["error"][:120]))
            continue
        peak = peak_flops(gpu, "fp32" if r["math"] in ("fp32", "tf32") else r["math"],
                          r["math"] == "tf32") if gpu else None
        r["peak_tflops"] = peak[2] / 1e12 if peak else None
        r["mfu"] = (r["flops_per_sample"] * r["samples_per_s"] / peak[2]
                    if peak and r.get("flops_per_sample") else None)
        ratios = ratios_vs_peers(r, rows)
        r["ratio_vs"] = ratios
        r["ratio_vs_hf"] = next(iter(ratios.values()), None)  # the first peer's (the default)
        acc = r.get("eval_accuracy")
        lines.append("| %s | %s | %s | %.1f | %.0f | %s | %s | %s | %s |" % (
            r["model"], r["impl"], r["precision"], r["samples_per_s"], r["tokens_per_s"],
            "%.1f%%" % (100 * r["mfu"]) if r["mfu"] is not None else "-",
            fmt_bytes(r["peak_memory_bytes"]),
            ", ".join("%.2fx%s" % (v, " " + k[3:] if len(ratios) > 1 else "")
                      for k, v in ratios.items()),
            "%.4f" % acc if acc is not None else "-"))
    return lines


def ratios_vs_peers(r, rows):
    """{peer impl: ftune samples/s over the peer's} for an ftune row, each HF row of the same
    model and precision that ran, in the rows' order; {} for a peer row."""
    if r["impl"] != "ftune" or "error" in r:
        return {}
    out = {}
    for p in rows:
        if (p["impl"].startswith("hf-") and "error" not in p and p["model"] == r["model"]
                and p["precision"].split("+")[0] == r["precision"].split("+")[0]
                and p["samples_per_s"] > 0):
            out.setdefault(p["impl"], r["samples_per_s"] / p["samples_per_s"])
    return out


def parser():
    """The command line; the GPU kit's families stage builds its runs' settings with it too."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ftune", required=True)
    ap.add_argument("--models", default="bert-base,minilm", help="bert-base,minilm")
    ap.add_argument("--precisions", default="bf16,fp32")
    ap.add_argument("--steps", type=int, default=0, help="optimizer steps (0: --epochs)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--timing-warmup", type=int, default=10)
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads, both sides (0: default)")
    ap.add_argument("--train", default=os.path.join(DATA, "train.jsonl"))
    ap.add_argument("--validation", default=os.path.join(DATA, "validation.jsonl"))
    ap.add_argument("--eval-limit", type=int, default=0, help="HF: evaluate the first N rows")
    ap.add_argument("--max-length", type=int, default=96)
    ap.add_argument("--batch", type=int, default=32, help="effective batch (HF micro-batch)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--minilm", default=MINILM)
    ap.add_argument("--model", action="append", default=[], metavar="NAME=DIR",
                    help="an HF BERT directory to run under NAME (repeatable; replaces --models): "
                         "the GPU kit passes random BERT-base and MiniLM-sized models it wrote")
    ap.add_argument("--work", help="working directory (default: a temporary one, removed)")
    ap.add_argument("--results", help="markdown results file (default by device; '' none)")
    ap.add_argument("--json", help="also write the rows as JSON lines here")
    ap.add_argument("--hf-arg", action="append", default=[],
                    help="extra argument for hf_peer_train.py (repeatable), e.g. --hf-arg=--lora-r=16")
    ap.add_argument("--peers", default="default",
                    help="HF variants, in order: default (as users run it: torch.compile on CUDA), "
                         "eager, compile")
    ap.add_argument("--ftune-set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra `ftune train` override (repeatable), e.g. peft.method=lora")
    ap.add_argument("--timeout", type=float, default=0, help="seconds per run (0: none)")
    return ap


def main():
    ap = parser()
    a = ap.parse_args()
    peers = a.peers.split(",")
    if not set(peers) <= set(PEERS):
        ap.error("--peers: unknown %s (%s)" % (sorted(set(peers) - set(PEERS)), ", ".join(PEERS)))
    for path, what in ((a.train, "training data"), (a.ftune, "ftune binary")):
        if not os.path.exists(path):
            sys.exit("gpu_vs_hf: %s %s not found%s" % (what, path, " (python3 examples/wordnet_pairs.py)"
                                                        if what == "training data" else ""))
    if a.validation and not os.path.exists(a.validation):
        a.validation = ""
    work = a.work or tempfile.mkdtemp(prefix="gpu-vs-hf-")
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, "runs.log")
    on_gpu = a.device.startswith("cuda")
    gpu, driver = gpu_name() if on_gpu else ("", "")
    if on_gpu and not gpu:
        sys.exit("gpu_vs_hf: --device %s but nvidia-smi sees no GPU (use --cpu for a smoke run)"
                 % a.device)

    models = []
    for spec in a.model:
        name, sep, path = spec.partition("=")
        if not sep or not os.path.isfile(os.path.join(path, "config.json")):
            sys.exit("gpu_vs_hf: --model %s: expected NAME=DIR with DIR/config.json" % spec)
        models.append((name, path))
    for m in ([] if a.model else a.models.split(",")):
        if m == "bert-base":
            path = os.path.join(work, "bert-base-random")
            if not os.path.exists(os.path.join(path, "model.safetensors")):
                rc, out = run([sys.executable, PEER, "--random", "bert-base", "--seed", "42",
                               "--write-random", path], log)
                if rc != 0:
                    sys.exit("gpu_vs_hf: writing the random BERT-base failed:\n" + out[-2000:])
            models.append(("bert-base", path))
        elif m == "minilm":
            if os.path.exists(os.path.join(a.minilm, "model.safetensors")):
                models.append(("minilm", a.minilm))
            else:
                print("gpu_vs_hf: %s not present (tools/fetch_minilm.sh); MiniLM skipped" % a.minilm)
        else:
            sys.exit("gpu_vs_hf: --models: unknown %r (bert-base, minilm)" % m)

    rows = []
    if a.json:
        open(a.json, "w").close()
    for name, path in models:
        for precision in a.precisions.split(","):
            for impl in ["ftune"] + peers:
                print("gpu_vs_hf: %s %s %s ..." % (name, impl, precision), flush=True)
                row = (ftune_row(a, name, path, precision, work, log) if impl == "ftune" else
                       hf_row(a, name, path, precision, work, log, impl))
                rows.append(row)
                if a.json:  # as each run finishes: a run killed later leaves the earlier rows
                    with open(a.json, "a") as f:
                        f.write(json.dumps(dict(row, gpu=gpu)) + "\n")
                if "error" in row:
                    print("gpu_vs_hf:   failed: %s (log: %s)" % (row["error"], log), flush=True)
    lines = table(rows, gpu)
    steps = "%d steps" % a.steps if a.steps else "%d epochs" % a.epochs
    where = "%s (driver %s)" % (gpu, driver) if on_gpu else "CPU (%d threads)" % (a.threads or os.cpu_count())
    print()
    print("ftune vs HF Trainer on %s: %s, effective batch %d, max_length %d, first %d steps untimed"
          % (where, steps, a.batch, a.max_length, a.timing_warmup))
    print("\n".join(lines))
    compiled = ["%s %s %.1f s" % (r["model"], r["precision"], r["compile_seconds"])
                for r in rows if r.get("compile_seconds") is not None]
    compile_line = ("HF torch.compile time (warm-up time beyond as many steady steps, not in the "
                    "rates): " + ", ".join(compiled)) if compiled else ""
    if compile_line:
        print(compile_line)
    goal = [r for r in rows if r["model"] == "bert-base" and r["impl"] == "ftune"
            and r.get("ratio_vs_hf") and r["precision"].startswith("bf16")]
    for r in goal:
        print("goal: BERT-base bf16 ftune/HF samples/s = %.2fx (target >= 1.5x): %s" %
              (r["ratio_vs_hf"], "met" if r["ratio_vs_hf"] >= 1.5 else "NOT met"))
    if a.json:  # again, with the MFU and ratio columns table() added
        with open(a.json, "w") as f:
            for r in rows:
                f.write(json.dumps(dict(r, gpu=gpu)) + "\n")
    results = a.results
    if results is None:
        results = os.path.join(ROOT, "bench", "results",
                               "gpu_vs_hf.md" if on_gpu else "gpu_vs_hf_cpu_smoke.md")
    if results:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
        versions = next((r["versions"] for r in rows if "versions" in r), {})
        with open(results, "w") as f:
            if on_gpu:
                f.write("# ftune vs PyTorch + HF Trainer on the GPU\n\n")
            else:
                f.write("# CPU smoke run of bench/gpu_vs_hf.py (not a benchmark)\n\n"
                        "Checks that the scripts run end to end; CPU numbers say nothing about "
                        "the GPU comparison (bench/results/gpu_vs_hf.md).\n\n")
            f.write("%s, %s UTC, ftune %s, torch %s, transformers %s.\n\n" % (
                where, datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
                commit or "?", versions.get("torch", "?"), versions.get("transformers", "?")))
            f.write("Command: `bench/gpu_vs_hf.py %s`\n\n"
                    % " ".join(sys.argv[1:]))
            f.write("Same data (%s), max_length %d, effective batch %d, %s, linear schedule "
                    "(warm-up 0.1), weight decay 0.01, clip 1.0, seed 42; the first %d optimizer "
                    "steps untimed. HF peer: %s. MFU: ftune's FLOP formula (src/train/flops.h, "
                    "padded tokens) over src/train/gpu_peak_flops.json's peak for the precision. "
                    "Peak memory: ftune peak_device_bytes vs torch max_memory_allocated "
                    "(on CPU: peak RSS).\n\n" % (
                        os.path.relpath(a.train, ROOT), a.max_length, a.batch, steps,
                        a.timing_warmup, next((json.dumps(r["options"]) for r in rows
                                               if "options" in r), "-")))
            f.write("\n".join(lines) + "\n\n")
            if compile_line:
                f.write(compile_line + "\n\n")
            if a.steps:
                f.write("With a step count the two sides train on different subsets of the data "
                        "(ftune's length buckets and HF's group_by_length mega-batches are drawn "
                        "differently): compare real tokens/s too. Full epochs cover the same "
                        "data.\n\n")
            for r in goal:
                f.write("BERT-base bf16: ftune/HF samples/s = %.2fx (goal >= 1.5x).\n\n" %
                        r["ratio_vs_hf"])
            f.write("<details><summary>rows (JSON)</summary>\n\n```\n")
            for r in rows:
                f.write(json.dumps(r) + "\n")
            f.write("```\n</details>\n")
        print("results: %s" % os.path.relpath(results, ROOT))
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
