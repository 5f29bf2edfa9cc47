#!/usr/bin/env bash
# Planned vs touched memory of short CPU runs (issue 42): all-MiniLM-L6-v2, 160 WordNet gloss
# pairs (examples/wordnet_pairs.py; 40 more for validation), one epoch, fixed micro-batch = the
# effective batch, data.packing auto (packed on the CPU), in the issue's four settings:
#   full 16 x 32, full 32 x 48 with gradient checkpointing, full 32 x 48, LoRA (r 8) 32 x 48
# (micro-batch rows x data.max_length). For each it prints summary.json's planned arena, the
# share of it the run touched (the arena's high-water mark per buffer, summed), the activations'
# planned and touched bytes, the peak RSS, and what the plan was made for. A benchmark, not a
# test: run it with two builds (before and after) to compare.
#   bench/memory_plan_exact.sh [build] [threads]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
THREADS="${2:-2}"
MODEL="${FTUNE_MINILM_DIR:-.cache/models/all-MiniLM-L6-v2}"
DATA="${FTUNE_BENCH_DATA:-/tmp/ftune-wordnet-160}"
OUT="${FTUNE_BENCH_OUT:-/tmp/ftune-memory-plan-exact}"
if [ ! -f "$DATA/train.jsonl" ]; then
  mkdir -p "$DATA/all"
  python3 examples/wordnet_pairs.py --out "$DATA/all" --seed 13 --max-train-groups 60 \
    --max-eval-groups 20 --quiet
  head -n 160 "$DATA/all/train.jsonl" >"$DATA/train.jsonl"
  head -n 40 "$DATA/all/validation.jsonl" >"$DATA/validation.jsonl"
fi
mkdir -p "$OUT"

run() {  # name rows max_length extra...
  local name=$1 rows=$2 len=$3
  shift 3
  "$BUILD/ftune" train --config examples/minilm_wordnet.yaml model.path="$MODEL" \
    data.train="$DATA/train.jsonl" data.validation="$DATA/validation.jsonl" \
    data.max_length="$len" training.batch_size="$rows" training.effective_batch_size="$rows" \
    training.threads="$THREADS" training.log_every=5 output.dir="$OUT/$name" \
    output.overwrite=true output.progress=plain output.tensorboard=false \
    checkpoint.save_best=false "$@" >"$OUT/$name.log" 2>&1
}
run full16x32 16 32 training.gradient_checkpointing=off
run ckpt32x48 32 48 training.gradient_checkpointing=on
run full32x48 32 48 training.gradient_checkpointing=off
run lora32x48 32 48 training.gradient_checkpointing=off peft.method=lora peft.r=8

python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
MiB = 1024 * 1024
print("| setting | planned MiB | touched | activations planned / touched MB | peak RSS MiB | "
      "RSS - plan MiB | planned for |")
print("|---|---|---|---|---|---|---|")
for name, label in (("full16x32", "full 16 x 32"), ("ckpt32x48", "full 32 x 48, checkpointing"),
                    ("full32x48", "full 32 x 48"), ("lora32x48", "LoRA 32 x 48")):
    m = json.load(open(os.path.join(out, name, "summary.json")))["memory"]
    planned, touched = m["planned_bytes"], m["touched_bytes"]
    act_p, act_t = m["planned"]["activations"], m["touched"]["activations"]
    rss = m.get("host", {}).get("peak_rss_bytes", 0)
    pf = m.get("planned_for")
    pf_text = (f"{pf['rows']} rows, {pf['tokens']} tokens, longest {pf['longest']}"
               if pf else "rows x max_length")
    print(f"| {label} | {planned / MiB:.1f} | {100 * touched / planned:.1f} % | "
          f"{act_p / 1e6:.0f} / {act_t / 1e6:.0f} ({100 * act_t / max(act_p, 1):.0f} %) | "
          f"{rss / MiB:.0f} | {(rss - planned) / MiB:.0f} | {pf_text} |")
EOF
