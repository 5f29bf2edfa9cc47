"""CPU scoring against the peers (issue 39): ftune (the C++ call under `ftune predict` and
ftune.Model.predict, bench/cpu_scoring_bench.cc; and the Python package itself) next to
sentence-transformers' CrossEncoder.predict and ONNX Runtime on an ONNX export of the same
model, on the same pairs, at 1 and 2 threads. Prints a markdown report with the load.

    /work/venv/bin/python bench/cpu_scoring.py --model runs/minilm-wordnet-listwise/model \\
        --source .cache/data/wordnet-7k/test.jsonl --scoring-bench build/bench/cpu_scoring_bench

The pairs: a reranker's mix of lengths, made from the source's {text, text_pair} rows: the query
is a row's text, the passage one or several definitions of other rows joined (1, 4, 12 or 30 of
them, drawn 40/30/20/10 %), so the pairs run from ~20 tokens to the truncation length; the token
length distribution is printed. Each peer runs with its best settings: ONNX Runtime with every
graph optimisation, intra-op threads = the thread count, one inter-op thread, length-sorted
batches padded to their longest row (as ftune batches); CrossEncoder with torch's threads = the
thread count and the batch size that scored fastest on a first pass (16, 32, 64 tried). Every
scorer runs in its own process (each thread setting clean), scorers alternate round by round,
and the table gives each one's median over all timed passes. Needs torch, transformers,
sentence-transformers, onnxruntime and onnx (a virtual environment) and `import ftune` (the build
tree's python/ on PYTHONPATH) for the package row.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.abspath(__file__)


def make_pairs(source, rows, seed):
    with open(source) as f:
        src = [json.loads(line) for line in f]
    rng = random.Random(seed)
    pairs = []
    for _ in range(rows):
        q = rng.choice(src)["text"]
        k = rng.choices([1, 4, 12, 30], weights=[40, 30, 20, 10])[0]
        passage = " ".join(rng.choice(src)["text_pair"] for _ in range(k))
        pairs.append({"text": q, "text_pair": passage})
    return pairs


def export_onnx(model_dir, path):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    enc = tok(["a query"], ["a passage of some words"], return_tensors="pt")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "seq"} for n in names}
    axes["logits"] = {0: "batch"}
    with torch.inference_mode():
        torch.onnx.export(model, tuple(enc[n] for n in names), path, input_names=names,
                          output_names=["logits"], dynamic_axes=axes, opset_version=17,
                          dynamo=False)


def timed_passes(fn, passes):
    rates = []
    for _ in range(passes):
        t0 = time.perf_counter()
        n = fn()
        rates.append(n / (time.perf_counter() - t0))
    return rates


# ---- workers: one scorer in a process of its own; print one JSON line --------------------------

def worker_ce(a, pairs):
    import torch
    torch.set_num_threads(a.threads)
    from sentence_transformers import CrossEncoder
    ce = CrossEncoder(a.model, device="cpu", max_length=a.max_length)
    identity = torch.nn.Identity()
    tuples = [(p["text"], p["text_pair"]) for p in pairs]
    bs = a.batch_size
    if bs == 0:  # tune: the fastest of a first pass over a quarter of the pairs
        best = None
        for cand in (16, 32, 64):
            t0 = time.perf_counter()
            ce.predict(tuples[: len(tuples) // 4], batch_size=cand, activation_fn=identity)
            dt = time.perf_counter() - t0
            if best is None or dt < best[0]:
                best = (dt, cand)
        bs = best[1]
    logits = np.asarray(ce.predict(tuples, batch_size=bs, activation_fn=identity))
    rates = timed_passes(lambda: len(ce.predict(tuples, batch_size=bs, activation_fn=identity)),
                         a.passes)
    return {"rates": rates, "batch_size": bs, "logits": logits.reshape(len(pairs), -1).tolist()}


def worker_ort(a, pairs):
    import onnxruntime as ort
    from transformers import AutoTokenizer
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(a.onnx, so, providers=["CPUExecutionProvider"])
    tok = AutoTokenizer.from_pretrained(a.model)
    bs = a.batch_size or 32

    def score():
        enc = tok([p["text"] for p in pairs], [p["text_pair"] for p in pairs],
                  truncation="longest_first", max_length=a.max_length)
        lengths = [len(x) for x in enc["input_ids"]]
        order = sorted(range(len(pairs)), key=lambda i: lengths[i])
        out = np.zeros((len(pairs), num_labels), np.float32)
        for s in range(0, len(order), bs):
            idx = order[s:s + bs]
            L = max(lengths[i] for i in idx)
            feeds = {}
            for name in ("input_ids", "attention_mask", "token_type_ids"):
                arr = np.zeros((len(idx), L), np.int64)
                for r, i in enumerate(idx):
                    arr[r, :lengths[i]] = enc[name][i]
                feeds[name] = arr
            out[idx] = sess.run(["logits"], feeds)[0]
        return out

    num_labels = sess.get_outputs()[0].shape[-1] if isinstance(
        sess.get_outputs()[0].shape[-1], int) else 2
    logits = score()
    rates = timed_passes(lambda: len(score()), a.passes)
    return {"rates": rates, "batch_size": bs, "logits": logits.tolist(),
            "version": ort.__version__}


def worker_ftune_py(a, pairs):
    import ftune
    if hasattr(ftune, "set_threads"):
        ftune.set_threads(a.threads)
    m = ftune.load(a.model, max_length=a.max_length)
    tuples = [(p["text"], p["text_pair"]) for p in pairs]
    bs = a.batch_size or 32
    logits = m.predict(tuples, batch_size=bs)
    rates = timed_passes(lambda: len(m.predict(tuples, batch_size=bs)), a.passes)
    return {"rates": rates, "batch_size": bs, "logits": np.asarray(logits).tolist(),
            "threads_set": hasattr(ftune, "set_threads")}


def worker_ftune_cpp(a, pairs, bench=None):
    logits_file = a.pairs + f".ftune{os.getpid()}.logits"
    cmd = [bench or a.scoring_bench, a.model, a.pairs, "--threads", str(a.threads), "--batch-size",
           str(a.batch_size or 32), "--repeats", str(a.passes), "--max-length",
           str(a.max_length), "--logits", logits_file]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True,
                                    text=True).stdout.strip().splitlines()[-1])
    logits = np.loadtxt(logits_file, ndmin=2)
    os.remove(logits_file)
    return {"rates": out["pairs_per_s"], "batch_size": out["batch_size"],
            "logits": logits.tolist(), "cpu_gemm": out.get("cpu_gemm"),
            "matmul": out.get("matmul")}


def worker_ftune_bf16(a, pairs):
    os.environ["FTUNE_SCORING_PRECISION"] = "bf16"
    return worker_ftune_cpp(a, pairs)


def worker_ftune_base(a, pairs):
    return worker_ftune_cpp(a, pairs, a.base_bench)


WORKERS = {"ce": worker_ce, "ort": worker_ort, "ftune_py": worker_ftune_py,
           "ftune_cpp": worker_ftune_cpp, "ftune_bf16": worker_ftune_bf16,
           "ftune_base": worker_ftune_base}
NAMES = {"ftune_cpp": "ftune (C++ TextScorer, `ftune predict`'s call)",
         "ftune_py": "ftune.Model.predict (Python package)",
         "ftune_bf16": "ftune (C++), FTUNE_SCORING_PRECISION=bf16",
         "ftune_base": "ftune (C++) before (--base-bench: another build)",
         "ort": "ONNX Runtime {ver}, graph opts all, sorted batches",
         "ce": "CrossEncoder.predict (sentence-transformers)"}


def run_worker(args, kind, threads, batch_size, env_extra=None):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env.update(env_extra or {})
    cmd = [sys.executable, HERE, "--worker", kind, "--model", args.model, "--pairs",
           args.pairs_file, "--threads", str(threads), "--passes", str(args.passes),
           "--batch-size", str(batch_size), "--max-length", str(args.max_length), "--onnx",
           args.onnx, "--scoring-bench", args.scoring_bench, "--base-bench", args.base_bench]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return json.loads(res.stdout.strip().splitlines()[-1])


def bf16_accuracy(args):
    """bf16 against fp32 scoring on a labelled JSONL with query groups: the largest logit and
    score differences, and how often the two agree on each group's order and its top pair."""
    with open(args.bf16_accuracy) as f:
        rows = [json.loads(line) for line in f][: args.accuracy_rows]
    path = "/tmp/ftune_cpu_scoring_accuracy.jsonl"
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps({"text": r["text"], "text_pair": r["text_pair"]}) + "\n")
    logits = {}
    for precision in ("fp32", "bf16"):
        out = path + "." + precision
        env = dict(os.environ, FTUNE_SCORING_PRECISION=precision)
        subprocess.run([args.scoring_bench, args.model, path, "--threads", "2", "--repeats", "0",
                        "--max-length", str(args.max_length), "--logits", out], check=True,
                       capture_output=True, env=env)
        logits[precision] = np.loadtxt(out, ndmin=2)
    a, b = logits["fp32"], logits["bf16"]
    score = (lambda x: x[:, 1] - x[:, 0]) if a.shape[1] == 2 else (lambda x: x[:, 0])
    sa, sb = score(a), score(b)
    groups = {}
    for i, r in enumerate(rows):
        groups.setdefault(r.get("group", i), []).append(i)
    multi = [g for g in groups.values() if len(g) > 1]
    same_order = sum(list(np.argsort(-sa[g], kind="stable")) == list(np.argsort(-sb[g], kind="stable"))
                     for g in multi)
    same_top = sum(int(np.argmax(sa[g])) == int(np.argmax(sb[g])) for g in multi)
    labels = np.array([r.get("label", -1) for r in rows])
    acc = {p: float(np.mean((score(x) > 0).astype(int) == labels)) for p, x in logits.items()}
    print(f"# bf16 against fp32 scoring ({len(rows)} pairs of {args.bf16_accuracy}, "
          f"{len(multi)} groups of 2+)\n")
    print("| largest logit difference | largest score difference | score range (fp32) | "
          "groups in the same order | same top pair | accuracy fp32 / bf16 (score > 0) |")
    print("| --- | --- | --- | --- | --- | --- |")
    print(f"| {np.abs(a - b).max():.3e} | {np.abs(sa - sb).max():.3e} | {sa.min():.2f} to "
          f"{sa.max():.2f} | {same_order}/{len(multi)} | {same_top}/{len(multi)} | "
          f"{acc['fp32']:.4f} / {acc['bf16']:.4f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--source", help="JSONL of {text, text_pair} the pairs are made from")
    ap.add_argument("--pairs", dest="pairs_file", default="/tmp/ftune_cpu_scoring_pairs.jsonl")
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--passes", type=int, default=2, help="timed passes a scorer a round")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--onnx", default="/tmp/ftune_cpu_scoring_model.onnx")
    ap.add_argument("--scoring-bench", default="build/bench/cpu_scoring_bench")
    ap.add_argument("--base-bench", default="",
                    help="another build's cpu_scoring_bench, for the ftune_base scorer")
    ap.add_argument("--scorers", default="ftune_cpp,ftune_py,ort,ce",
                    help="of ftune_cpp, ftune_py, ftune_bf16, ftune_base, ort, ce")
    ap.add_argument("--bf16-accuracy", metavar="JSONL",
                    help="only compare bf16 with fp32 scoring on this labelled, grouped JSONL")
    ap.add_argument("--accuracy-rows", type=int, default=2000)
    ap.add_argument("--worker", choices=sorted(WORKERS))
    ap.add_argument("--batch-size", type=int, default=0)
    args = ap.parse_args()

    if args.worker:  # a child process: one scorer
        with open(args.pairs_file) as f:
            pairs = [json.loads(line) for line in f]
        args.pairs = args.pairs_file
        args.threads = int(args.threads)
        print(json.dumps(WORKERS[args.worker](args, pairs)))
        return

    if args.bf16_accuracy:
        bf16_accuracy(args)
        return
    pairs = make_pairs(args.source, args.rows, args.seed)
    with open(args.pairs_file, "w") as f:
        for p in pairs:
            f.write(json.dumps(p) + "\n")
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(args.model)
    lengths = sorted(len(x) for x in tok([p["text"] for p in pairs],
                                         [p["text_pair"] for p in pairs],
                                         truncation="longest_first",
                                         max_length=args.max_length)["input_ids"])
    scorers = args.scorers.split(",")
    if "ort" in scorers and not os.path.exists(args.onnx):
        export_onnx(args.model, args.onnx)

    load_start = os.getloadavg()
    thread_counts = [int(t) for t in args.threads.split(",")]
    results = {}  # (kind, threads) -> list of worker results
    ce_batch = {}
    for t in thread_counts:
        for r in range(args.rounds):
            for kind in scorers:
                bs = 32
                if kind == "ce":
                    bs = ce_batch.get(t, 0)
                res = run_worker(args, kind, t, bs)
                if kind == "ce":
                    ce_batch[t] = res["batch_size"]
                results.setdefault((kind, t), []).append(res)
                print(f"# round {r + 1} threads {t} {kind}: "
                      f"{statistics.median(res['rates']):.1f} pairs/s "
                      f"(load {os.getloadavg()[0]:.2f})", file=sys.stderr)
    load_end = os.getloadavg()

    def med(kind, t):
        return statistics.median(x for res in results[(kind, t)] for x in res["rates"])

    def spread(kind, t):
        xs = [x for res in results[(kind, t)] for x in res["rates"]]
        return min(xs), max(xs)

    ref_kind = "ftune_cpp" if "ftune_cpp" in scorers else scorers[0]
    print("# CPU scoring: ftune against CrossEncoder.predict and ONNX Runtime\n")
    print(f"{len(pairs)} pairs made from {args.source} (seed {args.seed}), max_length "
          f"{args.max_length}; tokens a pair: median {lengths[len(lengths) // 2]}, "
          f"p10 {lengths[len(lengths) // 10]}, p90 {lengths[9 * len(lengths) // 10]}, "
          f"mean {sum(lengths) / len(lengths):.0f}, max {lengths[-1]}. Model {args.model}. "
          f"{args.rounds} rounds x {args.passes} timed passes a scorer, scorers alternating, "
          f"each in its own process; 1-minute load {load_start[0]:.2f} at the start, "
          f"{load_end[0]:.2f} at the end (a shared machine: other processes were running).\n")
    first = results[(ref_kind, thread_counts[0])][0]
    if first.get("cpu_gemm"):
        print(f"ftune's CPU GEMM: {first['cpu_gemm']}" +
              (f"; matmul: {first['matmul']}" if first.get("matmul") else "") + "\n")
    print("| threads | scorer | batch | pairs/s median (min-max) | ftune C++ / this | "
          "largest logit difference from ftune |")
    print("| --- | --- | --- | --- | --- | --- |")
    for t in thread_counts:
        ref = np.asarray(results[(ref_kind, t)][0]["logits"])
        for kind in scorers:
            res = results[(kind, t)][0]
            name = NAMES[kind].format(ver=res.get("version", ""))
            lo, hi = spread(kind, t)
            diff = np.abs(np.asarray(res["logits"]).reshape(ref.shape) - ref).max()
            print(f"| {t} | {name} | {res['batch_size']} | {med(kind, t):.1f} ({lo:.1f}-{hi:.1f})"
                  f" | {med(ref_kind, t) / med(kind, t):.2f}x | {diff:.2e} |")


if __name__ == "__main__":
    main()
