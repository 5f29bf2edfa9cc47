#!/usr/bin/env python3
"""The GPU kit's benchmark stage.

First ftune against PyTorch + HF Trainer with every hand optimisation on (bench/gpu_vs_hf.py, on
the device's own PyTorch): BERT-base and MiniLM-sized, random weights made here from a config (the
same file for both sides), bf16, the WordNet gloss pairs' length mix at max_length 128, 200
optimizer steps of effective batch 32, the first 100 untimed (GPU_STEPS, GPU_WARMUP): samples/s, real tokens/s, MFU, peak
memory, ftune/HF ratio; rows are kept as each run finishes. Then, in the MICRO_S seconds kept for
them, the GPU micro-benchmarks the kit carries (kit.json gpu_benches: the bench binaries whose
source says they are CUDA only, e.g. elementwise_bench's 128-bit vs scalar GB/s, and
cuda_kernels_bench once it is built; "not built yet" otherwise), each at most 15 s, their output in
the log and their last lines in the report.

With --device cpu (the selfcheck): a 3-step run of a tiny BERT on both sides on the CPU,
where the Python in use has torch and transformers; no micro-benchmarks.
"""
import json
import os
import sys
import shutil
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kit_models import random_bert  # noqa: E402
from kit_stage import missing_modules, open_stage, run  # noqa: E402

CUDA_KERNELS_BENCH = "cuda_kernels_bench"
# Optimizer steps of each GPU run and the first ones left out of the timing. The first kit run
# (H200, 60 steps, 10 left out) measured ftune at 993 samples/s on BERT-base while one profiled
# step took 6.9 ms (4,600 samples/s): with length-bucketed batches most of 60 steps met a new
# sequence length, and a new length costs a CUDA graph capture and cuDNN's attention plans once.
# A run of hundreds of steps (any real fine-tuning) has met them all; so does this window.
GPU_STEPS = int(os.environ.get("FTUNE_KIT_BENCH_STEPS", "200"))
GPU_WARMUP = int(os.environ.get("FTUNE_KIT_BENCH_WARMUP", "100"))
MICRO_S = 35  # kept for the micro-benchmarks after the comparison
MICRO_EACH_S = 15


def micro_benchmarks(kit, stage, log):
    names = list(kit.info.get("gpu_benches", []))
    if CUDA_KERNELS_BENCH in names:  # the one meant for this stage first
        names.insert(0, names.pop(names.index(CUDA_KERNELS_BENCH)))
    else:
        stage.row({"benchmark": CUDA_KERNELS_BENCH, "result": "not built yet"})
    for name in names:
        if stage.left() < 3:
            stage.row({"benchmark": name, "result": "not run: the stage's time ran out"})
            continue
        limit = min(MICRO_EACH_S, stage.left())
        rc, out = run([os.path.join(kit.bin, "bench", name)], log, limit)
        lines = [l for l in out.splitlines() if l.strip() and not l.startswith(("$ ", "[exit"))]
        stage.row({"benchmark": name, "result": "ok" if rc == 0 else
                   ("killed after %.0f s" % limit if rc == 124 else "exit %d" % rc),
                   "output": lines[-12:]})


def main():
    a, kit, stage, log, on_gpu = open_stage(__doc__)
    missing = missing_modules(["torch", "transformers"])
    if missing:
        if on_gpu:
            micro_benchmarks(kit, stage, log)
        return stage.finish("skipped" if not on_gpu else "fail",
                            "%s cannot import torch and transformers: no PyTorch + HF peer (%s)"
                            % (sys.executable, missing))
    scratch = tempfile.mkdtemp(prefix="gpu-kit-bench-")
    try:
        sizes = ["bert-base", "minilm"] if on_gpu else ["tiny"]
        root = os.environ.get("FTUNE_KIT_MODELS") or os.path.join(scratch, "models")
        models = [(s, random_bert(s, kit.fixtures, root)) for s in sizes]
        rows_file = os.path.join(a.stages, "bench-rows.jsonl")
        cmd = [sys.executable, os.path.join(kit.share, "bench", "gpu_vs_hf.py"),
               "--ftune", kit.ftune, "--precisions", "bf16", "--train",
               os.path.join(kit.data, "train.jsonl"), "--validation", "", "--results", "",
               "--json", rows_file, "--work", os.path.join(scratch, "work"),
               "--device", "cuda" if on_gpu else "cpu"]
        cmd += ["--model=%s=%s" % m for m in models]
        cmd += (["--steps", str(GPU_STEPS), "--timing-warmup", str(GPU_WARMUP), "--max-length",
                 "128", "--batch", "32"]
                if on_gpu else ["--steps", "3", "--timing-warmup", "1", "--max-length", "32",
                                "--batch", "8", "--threads", str(os.cpu_count() or 1)])
        env = dict(os.environ)
        if on_gpu and kit.feature("FTUNE_REQUIRE_CUDNN"):
            env["FTUNE_REQUIRE_CUDNN"] = "1"
        rc, out = run(cmd, log, stage.left() - (MICRO_S if on_gpu else 0), env)
        rows = []
        if os.path.exists(rows_file):
            with open(rows_file) as f:
                rows = [json.loads(l) for l in f if l.strip()]
        sys.path.insert(0, os.path.join(kit.share, "bench"))
        import gpu_vs_hf  # the benchmark's own MFU and ratio arithmetic
        gpu = next((r.get("gpu") for r in rows if r.get("gpu")), "")
        gpu_vs_hf.table(rows, gpu)
        for r in rows:
            if "error" in r:
                stage.row({"model": r["model"], "impl": r["impl"], "precision": r["precision"],
                           "result": "failed: " + r["error"][:200]})
                continue
            stage.row({"model": r["model"], "impl": r["impl"], "precision": r["precision"],
                       "samples_per_s": round(r["samples_per_s"], 1),
                       "real_tokens_per_s": round(r["tokens_per_s"]),
                       "MFU": "%.1f%%" % (100 * r["mfu"]) if r.get("mfu") is not None else "-",
                       "peak_memory_MiB": round(r["peak_memory_bytes"] / 2**20)
                       if r.get("peak_memory_bytes") else None,
                       "ftune_over_HF": round(r["ratio_vs_hf"], 2) if r.get("ratio_vs_hf") else None})
        ratios = ["%s %.2fx" % (r["model"], r["ratio_vs_hf"]) for r in rows if r.get("ratio_vs_hf")]
        done = len([r for r in rows if "error" not in r])
        if rc == 124:
            stage.note("gpu_vs_hf.py was stopped at its share of the stage's limit after %d of %d runs"
                       % (len(rows), 2 * len(models)))
        if on_gpu:
            micro_benchmarks(kit, stage, log)
        ok = rc == 0 and done == 2 * len(models)
        headline = ("ftune/HF samples/s (bf16): " + ", ".join(ratios) if ratios else
                    "%d of %d runs finished" % (done, 2 * len(models)))
        return stage.finish("ok" if ok else "fail", headline)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
