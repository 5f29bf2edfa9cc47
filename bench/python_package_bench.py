"""The Python package measured (issue 37): ftune.Model.predict next to sentence-transformers'
CrossEncoder.predict and plain transformers on the same pairs (throughput, largest logit
difference), and what the binding costs on calls of 1 and 8 rows against the C++ call it wraps
(bench/text_scorer_bench.cc). Prints a markdown report.

    python3 bench/python_package_bench.py --model runs/minilm-wordnet-listwise/model \\
        --pairs .cache/data/wordnet-7k/test.jsonl --scorer-bench build/bench/text_scorer_bench

Needs `import ftune` (the build tree's python/ on PYTHONPATH) and, for the peers, torch,
transformers and sentence-transformers (a virtual environment: never installed by the project).
CPU only; each side uses the same number of threads.
"""

import argparse
import json
import os
import statistics
import subprocess
import time

import numpy as np

import ftune


def timed(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a sequence-classification model directory")
    ap.add_argument("--pairs", required=True, help="JSONL with text and text_pair")
    ap.add_argument("--scorer-bench", required=True, help="build/bench/text_scorer_bench")
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    with open(args.pairs) as f:
        rows = [json.loads(line) for line in f][: args.rows]
    pairs = [(r["text"], r["text_pair"]) for r in rows]
    os.environ["OMP_NUM_THREADS"] = str(args.threads)

    m = ftune.load(args.model)
    m.predict(pairs[:64], batch_size=args.batch_size)  # the arena grows once
    ours = m.predict(pairs, batch_size=args.batch_size)
    t_ftune = timed(lambda: m.predict(pairs, batch_size=args.batch_size), args.repeats)

    import torch
    from sentence_transformers import CrossEncoder
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    torch.set_num_threads(args.threads)

    ce = CrossEncoder(args.model, device="cpu", max_length=m.max_length)
    identity = torch.nn.Identity()
    ce_logits = np.asarray(ce.predict(pairs, batch_size=args.batch_size, activation_fn=identity,
                                      convert_to_numpy=True)).reshape(len(pairs), -1)
    t_ce = timed(lambda: ce.predict(pairs, batch_size=args.batch_size, activation_fn=identity),
                 args.repeats)

    tok = AutoTokenizer.from_pretrained(args.model)
    hf = AutoModelForSequenceClassification.from_pretrained(args.model).eval()

    def hf_predict():
        out = []
        with torch.inference_mode():
            for i in range(0, len(pairs), args.batch_size):
                chunk = pairs[i:i + args.batch_size]
                enc = tok([a for a, _ in chunk], [b for _, b in chunk], padding=True,
                          truncation="longest_first", max_length=m.max_length,
                          return_tensors="pt")
                out.append(hf(**enc).logits.numpy())
        return np.concatenate(out)

    hf_logits = hf_predict()
    t_hf = timed(hf_predict, args.repeats)

    # The binding's cost: the same rows through Python and straight through C++.
    py_us = {}
    for n in (1, 8):
        chunk = pairs[:n]
        for _ in range(5):
            m.predict(chunk)
        times = []
        for _ in range(200):
            t0 = time.perf_counter()
            m.predict(chunk)
            times.append((time.perf_counter() - t0) * 1e6)
        py_us[n] = statistics.median(times)
    cpp = json.loads(subprocess.run([args.scorer_bench, args.model, args.pairs, "200",
                                     str(args.threads)], check=True, capture_output=True,
                                    text=True).stdout.strip().splitlines()[-1])

    n = len(pairs)
    print(f"# ftune.Model.predict vs CrossEncoder and transformers (CPU, {args.threads} threads)\n")
    print(f"{n} pairs of {args.pairs}, batches of {args.batch_size}, max_length {m.max_length}, "
          f"model {args.model}; median of {args.repeats} passes; load average "
          f"{os.getloadavg()[0]:.2f} at the end\n")
    print("| scorer | pairs/s | ftune speed-up | largest logit difference from ftune |")
    print("| --- | --- | --- | --- |")
    print(f"| ftune.Model.predict | {n / t_ftune:.1f} | 1.00x | 0 |")
    print(f"| CrossEncoder.predict (sentence-transformers) | {n / t_ce:.1f} | "
          f"{t_ce / t_ftune:.2f}x | {np.abs(ce_logits - ours).max():.2e} |")
    print(f"| transformers, batches in input order | {n / t_hf:.1f} | {t_hf / t_ftune:.2f}x | "
          f"{np.abs(hf_logits - ours).max():.2e} |")
    print("\n## The binding's overhead (median of 200 calls)\n")
    print("| rows a call | Python m.predict (us) | C++ TextScorer::score (us) | overhead (us) |")
    print("| --- | --- | --- | --- |")
    for k in (1, 8):
        c = cpp[f"rows_{k}_median_us"]
        print(f"| {k} | {py_us[k]:.0f} | {c:.0f} | {py_us[k] - c:.0f} |")
    import sentence_transformers
    import transformers
    print(f"\ntorch {torch.__version__}, transformers {transformers.__version__}, "
          f"sentence-transformers {sentence_transformers.__version__}")


if __name__ == "__main__":
    main()
