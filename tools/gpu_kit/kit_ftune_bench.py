#!/usr/bin/env python3
"""The GPU kit's ftune_bench stage: `ftune bench` on the device.

What each of ftune's optimisations buys on the GPU at hand: MiniLM-sized and BERT-base random
BERTs (the same models as the other stages), the WordNet gloss pairs' length mix at max_length
128, effective batch 32, each variant (precision, TF32, attention kernel, CUDA graphs, packing,
length buckets, gradient checkpointing, the planner's micro-batch, prefetch) timed over STEPS
optimizer steps after 2 x STEPS warm-up steps (every micro-batch shape captured and its cuDNN
plans built first), REPEATS times interleaved with the default. One row per model and variant:
samples/s, real tokens/s, MFU, planned and measured memory, micro-batch x accumulation, the
default's speedup over the variant (median and spread), the loss difference, or the reason a
variant did not run. The report JSON of each model is kept in the stage's logs.

With --device cpu (the selfcheck): a tiny BERT, 2 steps after 1 warm-up, one repeat.
"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kit_models import random_bert  # noqa: E402
from kit_stage import open_stage, run  # noqa: E402

STEPS = int(os.environ.get("FTUNE_KIT_FTUNE_BENCH_STEPS", "20"))
REPEATS = int(os.environ.get("FTUNE_KIT_FTUNE_BENCH_REPEATS", "2"))
FEATURE = "speedup_of_default"  # a key of `ftune bench`'s report: the build has the command


def mib(x):
    return round(x / 2**20, 1) if isinstance(x, (int, float)) else None


def rows_of(size, report):
    rows = []
    for v in report["variants"]:
        row = {"model": size, "variant": v["name"], "setting": v.get("setting") or ("defaults" if v["name"] == "default" else "-"),
               "status": v["status"]}
        if v["status"] != "ran":
            row["reason"] = v.get("reason", "")[:300]
            rows.append(row)
            continue
        s = v.get("speedup_of_default")
        row.update({"samples_per_s": round(v["samples_per_s"], 1),
                    "real_tokens_per_s": round(v["tokens_per_s"]),
                    "MFU": "%.1f%%" % (100 * v["mfu"]) if v.get("mfu") is not None else "-",
                    "planned_MiB": mib(v.get("planned_bytes")),
                    "measured_MiB": mib(v.get("measured_bytes")),
                    "micro_x_acc": v.get("micro_batch"),
                    "default_speedup": "%.2fx (%.2f-%.2f)" % (s["median"], s["min"], s["max"])
                    if s else "-",
                    "loss_vs_default": "%.1e" % v["loss_vs_default"]
                    if v.get("loss_vs_default") is not None else "-",
                    "setup_warmup_s": "%.1f/%.1f" % (v["setup_seconds"], v["warmup_seconds"])})
        rows.append(row)
    return rows


def main():
    a, kit, stage, log, on_gpu = open_stage(__doc__)
    if not kit.feature(FEATURE):
        return stage.finish("skipped", "this build has no `ftune bench`")
    scratch = tempfile.mkdtemp(prefix="gpu-kit-ftune-bench-")
    try:
        root = os.environ.get("FTUNE_KIT_MODELS") or os.path.join(scratch, "models")
        sizes = ["minilm", "bert-base"] if on_gpu else ["tiny"]
        steps, warmup, repeats, length = ((STEPS, 2 * STEPS, REPEATS, 128) if on_gpu
                                          else (2, 1, 1, 32))
        env = dict(os.environ)
        if on_gpu and kit.feature("FTUNE_REQUIRE_CUDNN"):
            env["FTUNE_REQUIRE_CUDNN"] = "1"
        ok, heads = True, []
        for size in sizes:
            if stage.left() < 5:
                stage.row({"model": size, "status": "not run: the stage's time ran out"})
                ok = False
                continue
            try:
                model = random_bert(size, kit.fixtures, root)
            except RuntimeError as e:
                stage.row({"model": size, "status": "not run: %s" % e})
                ok = False
                continue
            cfg = os.path.join(scratch, size + ".yaml")
            with open(cfg, "w") as f:
                f.write("model:\n  path: %s\ndata:\n  train: %s\n  max_length: %d\n"
                        "training:\n  effective_batch_size: 32\n  device: %s\n" % (
                            model, os.path.join(kit.data, "train.jsonl"), length, a.device))
            out = os.path.join(a.logs, "ftune-bench-%s.json" % size)
            cmd = [kit.ftune, "bench", "--config", cfg, "--steps", str(steps), "--warmup",
                   str(warmup), "--repeats", str(repeats), "--json", out]
            rc, text = run(cmd, log, stage.left(), env)
            if rc != 0 or not os.path.exists(out):
                tail = [l for l in text.strip().splitlines() if l.strip()][-1:] or [""]
                stage.row({"model": size, "status": "FAIL: %s: %s" % (
                    "killed at the stage's limit" if rc == 124 else "exit %d" % rc, tail[0][:300])})
                ok = False
                continue
            with open(out) as f:
                report = json.load(f)
            for row in rows_of(size, report):
                stage.row(row)
            d = report["variants"][0]
            best = sorted((v for v in report["variants"][1:] if v.get("speedup_of_default")),
                          key=lambda v: -v["speedup_of_default"]["median"])[:3]
            heads.append("%s %.0f samples/s (%s)" % (
                size, d["samples_per_s"], ", ".join("%s %s %.2fx" % (
                    v["name"], v["setting"], v["speedup_of_default"]["median"]) for v in best)))
        return stage.finish("ok" if ok else "fail", "; ".join(heads) or "no model ran")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
