#!/usr/bin/env python3
"""The GPU kit's families stage: ftune against PyTorch + HF on the other model families.

Cases (random weights from each model's real config, kit_models.FAMILIES; bf16; the same file of
pairs, max_length, effective batch, optimizer steps, schedule and seed on both sides, through
bench/gpu_vs_hf.py's ftune_row and hf_row):
  deberta-v3-base at 128 tokens (WordNet pairs) and at 512 (long pairs, below): HF runs DeBERTa
      eagerly (no SDPA path exists for its disentangled attention), then with torch.compile;
  modernbert-base at 512: HF with SDPA (its path without flash-attn installed), then compiled;
  qwen2.5-0.5b with LoRA r 16 / alpha 32 / dropout 0.05 on every linear layer, the score head
      trained whole, gradient checkpointing, at 512: ftune's frozen base in bf16 against HF + PEFT
      with the base loaded in bf16 (adapters fp32: PEFT's default), non-reentrant checkpointing,
      then compiled.
The data: at 128, a seeded sample of STEPS x batch WordNet gloss pairs (what the bench stage
trains on: ~23 tokens a pair with the MiniLM tokenizer); at 512, "long pairs": each row joins k
consecutive pairs of a seeded shuffle of the WordNet pairs, k uniform in 6..24, texts with texts
and glosses with glosses, the first pair's label (~300 tokens a row, 10% under 150, 10% over 460,
2% cut at 512). Either file holds exactly STEPS x batch rows: both sides train one epoch over the
same rows (each in its own length-grouped order). The first WARMUP steps are untimed (ftune's
captures and cuDNN plans per new length, HF's compilation), as in the bench stage.

Runs go in two passes, each row kept as its run finishes: first ftune and the HF peer without
torch.compile for every case, then the torch.compile peers, so a stage cut short by its limit
still has every case's main comparison. A row gives samples/s, real tokens/s, mean real tokens a
row, peak memory (ftune's device allocations, torch's max_memory_allocated), MFU where the side
has a FLOP formula for the model (ftune's own; the peer's BERT formula does not apply), ftune's
samples/s and real tokens/s over the row's peer's (on the peer's rows: each side's timed steps
are the second half of its own length-grouped order, so their rows differ and tokens/s is the
fairer ratio where their mean lengths differ), and on ftune's the kernels that ran (summary.json
gpu_paths). The report has one table per family.

With --device cpu (the selfcheck): one case per family (DeBERTa's two lengths are one at smoke
size), tiny models, max_length 64, batch 4, 3 steps after 1, one thread a side, no torch.compile
rows (about 3 CPU-minutes under load, within the stage's limit); skipped without torch,
transformers and peft.
"""
import json
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kit_models import random_family  # noqa: E402
from kit_stage import hf_peer, open_stage  # noqa: E402

STEPS = int(os.environ.get("FTUNE_KIT_FAMILIES_STEPS", "60"))
WARMUP = int(os.environ.get("FTUNE_KIT_FAMILIES_WARMUP", "30"))
RUN_CAP_S = {"ftune": 60, "eager": 90, "compile": 150}  # one run's most seconds on the GPU
MIN_LEFT_S = 15  # a run is not started with less of the stage's time left
LONG_K = (6, 24)  # WordNet pairs joined into one long row
SEED = 13
LORA = (["peft.method=lora", "peft.r=16", "peft.alpha=32", "peft.dropout=0.05",
         "peft.target_modules=all-linear", "training.gradient_checkpointing=on"],
        ["--lora-r=16", "--lora-alpha=32", "--lora-dropout=0.05", "--lora-targets=all-linear",
         "--base-dtype=bf16", "--gradient-checkpointing"])
# (case, family, max_length, effective batch, data, ftune overrides, peer switches)
CASES = [
    ("deberta-v3-base 128", "deberta-v3-base", 128, 32, "pairs", [], []),
    ("deberta-v3-base 512", "deberta-v3-base", 512, 16, "long", [], []),
    ("modernbert-base 512", "modernbert-base", 512, 16, "long", [], []),
    ("qwen2.5-0.5b LoRA 512", "qwen2.5-0.5b", 512, 16, "long", *LORA),
]
IMPL_ORDER = {"ftune": 0, "hf-eager": 1, "hf-compile": 2}


def sample_pairs(src, dest, n, seed=SEED):
    """dest: n WordNet pairs of src drawn without replacement by a seeded shuffle."""
    with open(src) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    random.Random(seed).shuffle(rows)
    with open(dest, "w") as f:
        for r in (rows * (n // len(rows) + 1))[:n]:
            f.write(json.dumps({"text": r["text"], "text_pair": r["text_pair"],
                                "label": r["label"]}) + "\n")
    return dest


def long_pairs(src, dest, n, k=LONG_K, seed=SEED):
    """dest: n long rows, each joining k (uniform in k[0]..k[1]) consecutive pairs of a seeded
    shuffle of src's pairs (texts with texts, glosses with glosses; the first pair's label)."""
    with open(src) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    rng = random.Random(seed)
    rng.shuffle(rows)
    at = 0
    with open(dest, "w") as f:
        for _ in range(n):
            group = [rows[(at + j) % len(rows)] for j in range(rng.randint(*k))]
            at += len(group)
            f.write(json.dumps({"text": " ".join(r["text"] for r in group),
                                "text_pair": " ".join(r["text_pair"] for r in group),
                                "label": group[0]["label"]}) + "\n")
    return dest


def stage_row(case, family, length, batch, r):
    """The report's row of one finished (or failed) run, in the family's table."""
    row = {"table": family, "case": case, "impl": r["impl"], "max_length": length,
           "batch": batch}
    if "error" in r:
        row["result"] = "failed: " + r["error"][:300]
        return row
    sps = r["samples_per_s"]
    row.update({"samples_per_s": round(sps, 1), "real_tokens_per_s": round(r["tokens_per_s"]),
                "mean_real_tokens": round(r["tokens_per_s"] / sps, 1) if sps else None,
                "peak_memory_MiB": round(r["peak_memory_bytes"] / 2**20)
                if r.get("peak_memory_bytes") else None,
                "MFU": "%.1f%%" % (100 * r["mfu"]) if r.get("mfu") is not None else "-",
                "ftune_over_this": round(r["ftune_over_this"], 2)
                if r.get("ftune_over_this") else None,
                "ftune_over_this_tokens": round(r["ftune_over_this_tokens"], 2)
                if r.get("ftune_over_this_tokens") else None})
    if r.get("micro_batch"):
        row["micro_x_acc"] = "%s x %s" % (r["micro_batch"], r.get("gradient_accumulation") or 1)
    if r.get("compile_seconds") is not None:
        row["compile_s"] = round(r["compile_seconds"], 1)
    if r.get("gpu_paths"):
        row["kernels"] = [r["gpu_paths"]]
    if r.get("options"):
        row["options"] = r["options"]
    return row


def main():
    a, kit, stage, log, on_gpu = open_stage(__doc__)
    gpu_vs_hf, finished = hf_peer(kit, stage, on_gpu)  # the benchmark's runs and rows
    if gpu_vs_hf is None:
        return finished
    scratch = tempfile.mkdtemp(prefix="gpu-kit-families-")
    try:
        root = os.environ.get("FTUNE_KIT_MODELS") or os.path.join(scratch, "models")
        steps, warmup = (STEPS, WARMUP) if on_gpu else (3, 1)
        gpu = gpu_vs_hf.gpu_name()[0] if on_gpu else ""
        src = os.path.join(kit.data, "train.jsonl")
        peers = ["eager", "compile"] if on_gpu else ["eager"]
        results = {}  # case -> rows as gpu_vs_hf makes them
        settings = {}
        not_run = []

        def case_args(length, batch, data, ftune_set, hf_args):
            rows = steps * batch
            path = os.path.join(scratch, "%s-%d.jsonl" % (data, rows))
            if not os.path.exists(path):
                (long_pairs if data == "long" else sample_pairs)(src, path, rows)
            argv = ["--ftune", kit.ftune, "--train", path, "--validation", "", "--results", "",
                    "--device", "cuda" if on_gpu else "cpu", "--steps", str(steps),
                    "--timing-warmup", str(warmup), "--batch", str(batch),
                    "--max-length", str(length)]
            argv += ["--ftune-set=" + s for s in ftune_set] + ["--hf-arg=" + s for s in hf_args]
            if not on_gpu:
                argv += ["--threads", "1"]
            return gpu_vs_hf.parser().parse_args(argv)

        def one(case, family, length, batch, impl, model):
            a_ = settings[case]
            left = stage.left()
            if left < MIN_LEFT_S:
                not_run.append("%s %s" % (case, impl))
                return
            a_.timeout = min(left, RUN_CAP_S[impl]) if on_gpu else left
            work = os.path.join(scratch, "work")
            os.makedirs(work, exist_ok=True)
            r = (gpu_vs_hf.ftune_row(a_, case, model, "bf16", work, log) if impl == "ftune" else
                 gpu_vs_hf.hf_row(a_, case, model, "bf16", work, log, impl))
            rows = results.setdefault(case, [])
            rows.append(r)
            gpu_vs_hf.table(rows, gpu)  # MFU and ratios of the rows so far
            mine = next((x for x in rows if x["impl"] == "ftune" and "error" not in x), None)
            if mine and r is not mine and "error" not in r and r["samples_per_s"] > 0:
                r["ftune_over_this"] = mine["samples_per_s"] / r["samples_per_s"]
                if r["tokens_per_s"] > 0:  # the timed halves of one epoch hold different rows
                    r["ftune_over_this_tokens"] = mine["tokens_per_s"] / r["tokens_per_s"]
            stage.row(stage_row(case, family, length, batch, r),
                      order=lambda x: (x["table"], x["case"], IMPL_ORDER.get(x["impl"], 9)))

        cases = CASES if on_gpu else [c for i, c in enumerate(CASES)
                                      if c[1] not in [d[1] for d in CASES[:i]]]
        for pass_ in (["ftune", "eager"], peers[1:]):
            for case, family, length, batch, data, ftune_set, hf_args in cases:
                if not pass_:
                    continue
                try:
                    model = random_family(family, kit.fixtures, root, tiny=not on_gpu)
                except (RuntimeError, ImportError, OSError) as e:
                    if "ftune" in pass_:
                        stage.row({"table": family, "case": case, "impl": "-",
                                   "result": "not run: writing the model failed: %s" % e})
                    continue
                batch, length = (batch, length) if on_gpu else (4, 64)
                settings.setdefault(case, case_args(length, batch, data, ftune_set, hf_args))
                for impl in pass_:
                    one(case, family, length, batch, impl, model)

        ok = True
        heads = []
        for case, *_ in cases:
            rows = results.get(case, [])
            if any("error" in r for r in rows if r["impl"] in ("ftune", "hf-eager")):
                ok = False
            mine = next((r for r in rows if r["impl"] == "ftune" and "error" not in r), None)
            ratios = ["%s %.2fx" % (r["impl"][3:], r["ftune_over_this"])
                      for r in rows if r.get("ftune_over_this")]
            if mine:
                heads.append("%s %.0f/s%s" % (case, mine["samples_per_s"],
                                              " (" + ", ".join(ratios) + ")" if ratios else ""))
        if not_run:
            stage.note("not run, the stage's time ran out: %s (FTUNE_KIT_LIMITS=%s=420 runs "
                       "them all)" % (", ".join(not_run), a.stage))
            ok = ok and all(n.endswith(" compile") for n in not_run)  # compile rows may wait
        if not on_gpu:
            stage.note("torch.compile rows run on the GPU only")
        return stage.finish("ok" if ok else "fail",
                            "ftune samples/s (over HF): " + "; ".join(heads) if heads
                            else "no case ran")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
