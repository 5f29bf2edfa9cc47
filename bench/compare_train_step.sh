#!/usr/bin/env bash
# ftune vs PyTorch, one full training step (forward + loss + backward + clip + AdamW) of MiniLM- and
# BERT-base-sized classifiers (and DeBERTa-v3-base against HF's eager DeBERTa, when named) at batch
# 32 x 128 (or $BATCH x $SEQ) on the CPU with the same thread count. Needs the ftune build
# (build/bench/train_step_bench) and Python with torch + transformers for the peer ($PYTHON).
#   bench/compare_train_step.sh [threads] [steps] [models, default "minilm bert-base"]
#   BATCH=8 SEQ=512 bench/compare_train_step.sh 2 2 deberta-v3-base
#   ROUNDS=3 BASE_BIN=/path/to/older/train_step_bench bench/compare_train_step.sh 1 2 minilm
# On a machine shared with other work the pair is run ROUNDS times (default 1), ftune and PyTorch
# back to back in each round (and BASE_BIN's ftune, another build, first when given), each round
# printed with the 1-minute load before it; the ratio is PyTorch's ms/step over ftune's, by wall
# clock and by the process's CPU time (user + sys of all threads: steadier under load, but
# PyTorch's OpenMP threads spinning at barriers count in it).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS="${1:-$(nproc)}"
STEPS="${2:-5}"
MODELS="${3:-minilm bert-base}"
ROUNDS="${ROUNDS:-1}"
PYTHON="${PYTHON:-python3}"
SHAPE=(--batch "${BATCH:-32}" --seq "${SEQ:-128}")
BIN="${FTUNE_BUILD_DIR:-build}/bench/train_step_bench"
[ -x "$BIN" ] || { echo "build $BIN first (cmake --build build --target train_step_bench)"; exit 1; }
[ -z "${BASE_BIN:-}" ] || [ -x "$BASE_BIN" ] || { echo "BASE_BIN $BASE_BIN is not executable"; exit 1; }
printf "%-10s %-5s %-6s %-8s %10s %10s %10s %10s %9s\n" model round load impl ms/step cpu_ms \
  samples/s "ratio" "cpu_ratio"
for model in $MODELS; do
  steps="$STEPS"; [ "$model" != minilm ] && steps=$(( (STEPS + 1) / 2 ))
  for round in $(seq 1 "$ROUNDS"); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    b='{}'
    [ -n "${BASE_BIN:-}" ] && b=$("$BASE_BIN" --model "$model" "${SHAPE[@]}" --threads "$THREADS" --steps "$steps" --warmup 1 --json)
    f=$("$BIN" --model "$model" "${SHAPE[@]}" --threads "$THREADS" --steps "$steps" --warmup 1 --json)
    t=$("$PYTHON" bench/torch_train_step.py --model "$model" "${SHAPE[@]}" --threads "$THREADS" --steps "$steps" --warmup 1 --json | tail -1)
    "$PYTHON" - "$model" "$round" "$load" "$f" "$t" "$b" <<'PY'
import json, sys
model, rnd, load = sys.argv[1:4]
f, t, b = (json.loads(a) for a in sys.argv[4:7])
# The ratios from the step times (samples/s are rounded in the JSON: 0.03 / 0.015 at 8 x 512).
def row(name, r):
    wall = t["ms_per_step"] / r["ms_per_step"]
    cpu = t["cpu_ms_per_step"] / r["cpu_ms_per_step"]
    print(f"{model:10s} {rnd:5s} {load:6s} {name:8s} {r['ms_per_step']:10.1f} {r['cpu_ms_per_step']:10.1f} "
          f"{r['samples_per_s']:10.3f} {wall:9.2f}x {cpu:8.2f}x")
if b:
    row("base", b)
row("ftune", f)
row("pytorch", t)
PY
  done
done
