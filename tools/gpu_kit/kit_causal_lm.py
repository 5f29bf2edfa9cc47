#!/usr/bin/env python3
"""The GPU kit's causal_lm stage: ftune against PyTorch + HF + PEFT fine-tuning a causal LM (issue 40).

One case: a Qwen2.5-0.5B-shaped Qwen2ForCausalLM (kit_models: random weights drawn from the Hub
config's shapes, bf16 as the Hub stores it, the head tied to the 151936 x 896 embedding; the kit
machine has no network, so no pretrained weights: speed and memory do not depend on them), LoRA
r 16 / alpha 32 / dropout 0.05 on every linear layer (lm_head frozen, PEFT's CAUSAL_LM), bf16, no
gradient checkpointing, max_length 512, effective batch 16. Rows: prompt -> completion made from
the WordNet pairs of a seeded shuffle (prompt: one example sentence; completion: the glosses of k
consecutive pairs, k uniform in 6..24, the completion alone learned). ftune (`ftune train`,
model.task causal_lm: the fused chunked LM-head loss, ops/lm_head_loss.h) against HF + PEFT eager
and with torch.compile (bench/hf_peer_train.py --causal-lm: materialised logits, transformers'
ForCausalLMLoss), STEPS steps of which the first WARMUP are untimed, as the families stage. A
row: samples/s, real tokens/s, ftune's over the peer's, peak device memory (ftune's allocations;
torch's max_memory_allocated), and on ftune's the planned device memory against the measured
(summary.json memory), the micro-batch and the kernels that ran (gpu_paths).

With --device cpu (the selfcheck): a tiny Qwen2 causal LM, max_length 64, batch 4, 3 steps after
1, one thread a side, no torch.compile; skipped where the Python lacks torch, transformers and
peft (the model's parameter names come from transformers), as the families stage.
"""
import json
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kit_families import stage_row  # noqa: E402
from kit_models import random_family  # noqa: E402
from kit_stage import hf_peer, open_stage  # noqa: E402

STEPS = int(os.environ.get("FTUNE_KIT_CAUSAL_LM_STEPS", "60"))
WARMUP = int(os.environ.get("FTUNE_KIT_CAUSAL_LM_WARMUP", "30"))
RUN_CAP_S = {"ftune": 60, "eager": 90, "compile": 150}  # one run's most seconds on the GPU
MIN_LEFT_S = 15
K = (6, 24)  # glosses in one completion
SEED = 13
FAMILY = "qwen2.5-0.5b"
FTUNE_SET = ["model.task=causal_lm", "peft.method=lora", "peft.r=16", "peft.alpha=32",
             "peft.dropout=0.05", "peft.target_modules=all-linear"]
HF_ARGS = ["--causal-lm", "--lora-r=16", "--lora-alpha=32", "--lora-dropout=0.05",
           "--lora-targets=all-linear", "--base-dtype=bf16"]


def completion_rows(src, dest, n, k=K, seed=SEED):
    """dest: n prompt -> completion rows from src's WordNet pairs: a seeded shuffle, each row k
    consecutive pairs, the first pair's sentence as the prompt and the k glosses as the
    completion."""
    with open(src) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    rng = random.Random(seed)
    rng.shuffle(rows)
    at = 0
    with open(dest, "w") as f:
        for _ in range(n):
            group = [rows[(at + j) % len(rows)] for j in range(rng.randint(*k))]
            at += len(group)
            f.write(json.dumps({"prompt": group[0]["text"] + "\n",
                                "completion": " ".join(r["text_pair"] for r in group)}) + "\n")
    return dest


def memory_fields(r):
    """ftune's planned and measured device memory (summary.json memory), and their ratio."""
    planned, measured = r.get("planned_total_bytes"), r.get("measured_device_bytes")
    out = {}
    if planned:
        out["planned_MiB"] = round(planned / 2**20)
    if measured:
        out["measured_MiB"] = round(measured / 2**20)
    if planned and measured:
        out["measured_over_planned"] = round(measured / planned, 3)
    return out


def main():
    a, kit, stage, log, on_gpu = open_stage(__doc__)
    gpu_vs_hf, finished = hf_peer(kit, stage, on_gpu)  # the benchmark's runs and rows
    if gpu_vs_hf is None:
        return finished
    scratch = tempfile.mkdtemp(prefix="gpu-kit-causal-lm-")
    try:
        root = os.environ.get("FTUNE_KIT_MODELS") or os.path.join(scratch, "models")
        steps, warmup = (STEPS, WARMUP) if on_gpu else (3, 1)
        length, batch = (512, 16) if on_gpu else (64, 4)
        impls = ["ftune", "eager"] + (["compile"] if on_gpu else [])
        case = "%s causal LM, LoRA, %d" % (FAMILY, length)
        try:
            model = random_family(FAMILY, kit.fixtures, root, tiny=not on_gpu, causal_lm=True)
        except (RuntimeError, ImportError, OSError, ValueError) as e:
            return stage.finish("skipped" if not on_gpu else "fail",
                                "writing the model failed: %s" % e)
        data = completion_rows(os.path.join(kit.data, "train.jsonl"),
                               os.path.join(scratch, "completions.jsonl"), steps * batch)
        argv = ["--ftune", kit.ftune, "--train", data, "--validation", "", "--results", "",
                "--device", "cuda" if on_gpu else "cpu", "--steps", str(steps),
                "--timing-warmup", str(warmup), "--batch", str(batch), "--max-length", str(length)]
        argv += ["--ftune-set=" + s for s in FTUNE_SET] + ["--hf-arg=" + s for s in HF_ARGS]
        if not on_gpu:
            argv += ["--threads", "1"]
        args = gpu_vs_hf.parser().parse_args(argv)
        gpu = gpu_vs_hf.gpu_name()[0] if on_gpu else ""
        rows, not_run, ok = [], [], True
        work = os.path.join(scratch, "work")
        os.makedirs(work, exist_ok=True)
        for impl in impls:
            left = stage.left()
            if left < MIN_LEFT_S:
                not_run.append(impl)
                continue
            args.timeout = min(left, RUN_CAP_S[impl]) if on_gpu else left
            r = (gpu_vs_hf.ftune_row(args, case, model, "bf16", work, log) if impl == "ftune" else
                 gpu_vs_hf.hf_row(args, case, model, "bf16", work, log, impl))
            rows.append(r)
            gpu_vs_hf.table(rows, gpu)
            mine = next((x for x in rows if x["impl"] == "ftune" and "error" not in x), None)
            if mine and r is not mine and "error" not in r and r["samples_per_s"] > 0:
                r["ftune_over_this"] = mine["samples_per_s"] / r["samples_per_s"]
                if r["tokens_per_s"] > 0:
                    r["ftune_over_this_tokens"] = mine["tokens_per_s"] / r["tokens_per_s"]
            row = stage_row(case, FAMILY + " causal LM", length, batch, r)
            if impl == "ftune" and "error" not in r:
                row.update(memory_fields(r))
            stage.row(row)
            if "error" in r and impl in ("ftune", "eager"):
                ok = False
        if not_run:
            stage.note("not run, the stage's time ran out: %s (FTUNE_KIT_LIMITS=%s=330 runs "
                       "them all)" % (", ".join(not_run), a.stage))
            ok = ok and not_run == ["compile"]
        if not on_gpu:
            stage.note("torch.compile rows run on the GPU only")
        mine = next((r for r in rows if r["impl"] == "ftune" and "error" not in r), None)
        ratios = ["%s %.2fx" % (r["impl"][3:], r["ftune_over_this"])
                  for r in rows if r.get("ftune_over_this")]
        mem = memory_fields(mine) if mine else {}
        head = ("ftune %.1f samples/s%s%s" % (
            mine["samples_per_s"], " (" + ", ".join(ratios) + ")" if ratios else "",
            ", device memory measured/planned %s" % mem["measured_over_planned"]
            if "measured_over_planned" in mem else "") if mine else "ftune did not run")
        return stage.finish("ok" if ok and mine else "fail", head)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
