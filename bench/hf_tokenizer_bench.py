#!/usr/bin/env python3
"""HF tokenizers (Rust) throughput on the corpus and tokenizer files of bench/tokenizer_bench.cc.

  build/bench/tokenizer_bench --write-corpus /tmp/corpus.txt --json /tmp/ftune.json
  python3 bench/hf_tokenizer_bench.py --corpus /tmp/corpus.txt --ftune-json /tmp/ftune.json

For each tokenizer: `Tokenizer.encode_batch_fast` (no offsets, like ftune) and `encode_batch`
over the whole corpus, on one thread (TOKENIZERS_PARALLELISM=false: the batch runs sequentially)
and on all threads (rayon, RAYON_NUM_THREADS = the thread count ftune used). One-thread numbers
use the process CPU time (as tokenizer_bench does), all-thread numbers wall time. Stored truncation
and padding are disabled; special tokens are added, as in ftune's bench. Each measurement runs
in its own process so the thread settings apply. Prints MB/s and sentences/s, and with
--ftune-json a side-by-side table with ftune's numbers and the speed-up.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def default_specs():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    fx = os.path.join(root, "tests/fixtures/tokenizers")
    specs = [(n, os.path.join(fx, n, "tokenizer.json")) for n in ("minilm", "wordpiece_cased", "roberta_bpe",
                                                                  "unigram_precompiled")]
    shared = os.environ.get("FTUNE_SHARED_DIR", os.path.join(root, "..", "shared"))
    for n in ("llama2", "llama3", "gemma3"):
        p = os.path.join(shared, "fixtures/tokenizers", n + ".tokenizer.json")
        if os.path.exists(p):
            specs.append((n, p))
    return specs


def measure(path, corpus_file, seconds, fast, cpu_time):
    """Runs inside the child process: throughput of one tokenizer with the inherited env."""
    from tokenizers import Tokenizer

    with open(corpus_file, encoding="utf-8") as f:
        corpus = f.read().split("\n")
    if corpus and corpus[-1] == "":
        corpus.pop()
    nbytes = sum(len(s.encode("utf-8")) for s in corpus)
    tok = Tokenizer.from_file(path)
    tok.no_truncation()
    tok.no_padding()
    encode = tok.encode_batch_fast if fast else tok.encode_batch
    encode(corpus[:1000], add_special_tokens=True)  # warm-up
    clock = time.process_time if cpu_time else time.perf_counter
    passes, t0 = 0, clock()
    while True:
        encode(corpus, add_special_tokens=True)
        passes += 1
        elapsed = clock() - t0
        if elapsed >= seconds:
            break
    return {"mb_s": nbytes * passes / elapsed / 1e6, "sent_s": len(corpus) * passes / elapsed}


def run_child(path, corpus, seconds, fast, threads):
    env = dict(os.environ)
    if threads == 1:
        env["TOKENIZERS_PARALLELISM"] = "false"
        env["RAYON_NUM_THREADS"] = "1"
    else:
        env["TOKENIZERS_PARALLELISM"] = "true"
        env["RAYON_NUM_THREADS"] = str(threads)
    out = subprocess.run([sys.executable, __file__, "--child", path, "--corpus", corpus, "--seconds", str(seconds)]
                         + (["--fast"] if fast else []) + (["--cpu-time"] if threads == 1 else []), env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", required=True, help="one sentence per line (tokenizer_bench --write-corpus)")
    ap.add_argument("--ftune-json", help="results of tokenizer_bench --json, for the comparison table")
    ap.add_argument("--threads", type=int, default=0, help="threads for the parallel runs (default: ftune's, or all)")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--fast", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cpu-time", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("specs", nargs="*", help="name=path/to/tokenizer.json (default: the fixtures)")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.corpus, args.seconds, args.fast, args.cpu_time)))
        return

    ftune = None
    if args.ftune_json:
        with open(args.ftune_json) as f:
            ftune = json.load(f)
    threads = args.threads or (ftune["threads"] if ftune else os.cpu_count())
    specs = [tuple(s.split("=", 1)) for s in args.specs] or default_specs()
    import tokenizers

    print(f"HF tokenizers {tokenizers.__version__}; parallel runs on {threads} threads")
    rows = []
    for name, path in specs:
        if os.path.isdir(path):
            path = os.path.join(path, "tokenizer.json")
        r = {"name": name}
        for fast in (True, False):
            key = "fast" if fast else "full"
            r[key + "_1"] = run_child(path, args.corpus, args.seconds, fast, 1)
            r[key + "_n"] = run_child(path, args.corpus, args.seconds, fast, threads)
        print(f"  {name:20s} encode_batch_fast: 1 thread {r['fast_1']['mb_s']:7.2f} MB/s {r['fast_1']['sent_s']:9.0f} "
              f"sent/s | {threads} threads {r['fast_n']['mb_s']:7.2f} MB/s {r['fast_n']['sent_s']:9.0f} sent/s; "
              f"encode_batch 1 thread {r['full_1']['mb_s']:7.2f} MB/s", flush=True)
        rows.append(r)

    if ftune:
        by_name = {r["name"]: r for r in ftune["results"]}
        print()
        print(f"| tokenizer | ftune 1 thread MB/s (sent/s) | HF 1 thread MB/s (sent/s) | speed-up | "
              f"ftune {threads} threads MB/s (sent/s) | HF {threads} threads MB/s (sent/s) | speed-up |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            f = by_name.get(r["name"])
            if not f:
                continue
            h1, hn = r["fast_1"], r["fast_n"]
            print(f"| {r['name']} | {f['mb_s_1']:.2f} ({f['sent_s_1']:.0f}) | {h1['mb_s']:.2f} ({h1['sent_s']:.0f}) | "
                  f"{f['mb_s_1'] / h1['mb_s']:.2f}x | {f['mb_s_n']:.2f} ({f['sent_s_n']:.0f}) | "
                  f"{hn['mb_s']:.2f} ({hn['sent_s']:.0f}) | {f['mb_s_n'] / hn['mb_s']:.2f}x |")


if __name__ == "__main__":
    main()
