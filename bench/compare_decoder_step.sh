#!/usr/bin/env bash
# ftune vs PyTorch + PEFT: one LoRA training step (forward, loss, backward, clipping, AdamW over
# the trained parameters) of a ~100M-parameter Llama-shaped classifier, LoRA r=16 on every linear
# layer, fp32 on the CPU with the same thread count, batch x seq tokens. Needs the ftune build
# (build/bench/train_step_bench --model llama-100m --lora 16) and Python with torch, transformers
# and peft ($PYTHON).
#   bench/compare_decoder_step.sh [threads] [steps] [batch] [seq]
#   ROUNDS=3 LORA_DROPOUT=0 BASE_BIN=/path/to/older/train_step_bench bench/compare_decoder_step.sh 2 3
# Each of ROUNDS rounds (default 1) runs BASE_BIN's ftune (another build, when given), ftune, then
# the peer, back to back (the machine's speed drifts), each round printed with the 1-minute load
# before it; the adapters' dropout is LORA_DROPOUT (default 0.05). The ratio is the peer's ms/step
# over the row's, by wall clock and by the process's CPU time (user + sys of all threads).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS="${1:-$(nproc)}"
STEPS="${2:-5}"
BATCH="${3:-4}"
SEQ="${4:-128}"
ROUNDS="${ROUNDS:-1}"
DROP="${LORA_DROPOUT:-0.05}"
PYTHON="${PYTHON:-python3}"
BIN="${FTUNE_BUILD_DIR:-build}/bench/train_step_bench"
[ -x "$BIN" ] || { echo "build $BIN first (cmake --build build --target train_step_bench)"; exit 1; }
[ -z "${BASE_BIN:-}" ] || [ -x "$BASE_BIN" ] || { echo "BASE_BIN $BASE_BIN is not executable"; exit 1; }
ARGS=(--model llama-100m --lora 16 --lora-dropout "$DROP" --threads "$THREADS" --steps "$STEPS"
      --warmup 1 --batch "$BATCH" --seq "$SEQ" --json)
echo "llama-100m LoRA r=16 dropout $DROP, ${BATCH}x${SEQ}, $THREADS threads, $STEPS timed steps"
printf "%-5s %-6s %-13s %9s %9s %10s %8s %9s\n" round load impl ms/step cpu_ms samples/s ratio cpu_ratio
for round in $(seq 1 "$ROUNDS"); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  b='{}'
  [ -n "${BASE_BIN:-}" ] && b=$("$BASE_BIN" "${ARGS[@]}")
  f=$("$BIN" "${ARGS[@]}")
  t=$("$PYTHON" bench/torch_decoder_step.py --threads "$THREADS" --steps "$STEPS" --warmup 1 \
        --batch "$BATCH" --seq "$SEQ" --lora-dropout "$DROP" --json | tail -1)
  "$PYTHON" - "$round" "$load" "$f" "$t" "$b" <<'PY'
import json, sys
rnd, load = sys.argv[1:3]
f, t, b = (json.loads(a) for a in sys.argv[3:6])
def row(name, r):
    print(f"{rnd:5s} {load:6s} {name:13s} {r['ms_per_step']:9.1f} {r['cpu_ms_per_step']:9.1f} "
          f"{r['samples_per_s']:10.2f} {t['ms_per_step'] / r['ms_per_step']:7.2f}x "
          f"{t['cpu_ms_per_step'] / r['cpu_ms_per_step']:8.2f}x")
if b:
    row("base", b)
row("ftune", f)
row("pytorch+peft", t)
PY
done
