#!/usr/bin/env bash
# ftune vs PyTorch + PEFT: one LoRA training step (forward, loss, backward, clipping, AdamW over
# the trained parameters) of a ~100M-parameter Llama-shaped classifier, LoRA r=16 on every linear
# layer, fp32 on the CPU with the same thread count, batch x seq tokens. Needs the ftune build
# (build/bench/train_step_bench --model llama-100m --lora 16) and Python with torch, transformers
# and peft ($PYTHON). Run it under nice on a shared machine and note the load (printed around it).
#   bench/compare_decoder_step.sh [threads] [steps] [batch] [seq]
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS="${1:-$(nproc)}"
STEPS="${2:-5}"
BATCH="${3:-4}"
SEQ="${4:-128}"
PYTHON="${PYTHON:-python3}"
BIN="${FTUNE_BUILD_DIR:-build}/bench/train_step_bench"
[ -x "$BIN" ] || { echo "build $BIN first (cmake --build build --target train_step_bench)"; exit 1; }
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
f=$("$BIN" --model llama-100m --lora 16 --threads "$THREADS" --steps "$STEPS" --warmup 1 --batch "$BATCH" --seq "$SEQ" --json)
t=$("$PYTHON" bench/torch_decoder_step.py --threads "$THREADS" --steps "$STEPS" --warmup 1 \
      --batch "$BATCH" --seq "$SEQ" --json | tail -1)
echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)"
"$PYTHON" - "$f" "$t" <<'PY'
import json, sys
f, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"{'impl':14s} {'ms/step':>9s} {'min ms':>9s} {'samples/s':>10s} {'ratio':>7s}")
for r in (f, t):
    print(f"{r['impl']:14s} {r['ms_per_step']:9.1f} {r['min_ms']:9.1f} {r['samples_per_s']:10.2f} "
          f"{t['ms_per_step'] / r['ms_per_step']:6.2f}x")
PY
