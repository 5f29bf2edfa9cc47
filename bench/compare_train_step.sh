#!/usr/bin/env bash
# ftune vs PyTorch, one full training step (forward + loss + backward + clip + AdamW) of MiniLM- and
# BERT-base-sized classifiers (and DeBERTa-v3-base against HF's eager DeBERTa, when named) at batch
# 32 x 128 (or $BATCH x $SEQ) on the CPU with the same thread count. Needs the ftune build
# (build/bench/train_step_bench) and Python with torch + transformers for the peer ($PYTHON).
#   bench/compare_train_step.sh [threads] [steps] [models, default "minilm bert-base"]
#   BATCH=8 SEQ=512 bench/compare_train_step.sh 2 2 deberta-v3-base
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS="${1:-$(nproc)}"
STEPS="${2:-5}"
MODELS="${3:-minilm bert-base}"
PYTHON="${PYTHON:-python3}"
SHAPE=(--batch "${BATCH:-32}" --seq "${SEQ:-128}")
BIN="${FTUNE_BUILD_DIR:-build}/bench/train_step_bench"
[ -x "$BIN" ] || { echo "build $BIN first (cmake --build build --target train_step_bench)"; exit 1; }
printf "%-10s %-8s %12s %12s %8s\n" model impl ms/step samples/s ratio
for model in $MODELS; do
  steps="$STEPS"; [ "$model" != minilm ] && steps=$(( (STEPS + 1) / 2 ))
  f=$("$BIN" --model "$model" "${SHAPE[@]}" --threads "$THREADS" --steps "$steps" --warmup 1 --json)
  t=$("$PYTHON" bench/torch_train_step.py --model "$model" "${SHAPE[@]}" --threads "$THREADS" --steps "$steps" --warmup 1 --json | tail -1)
  "$PYTHON" - "$model" "$f" "$t" <<'PY'
import json, sys
model, f, t = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
fs, ts = f["samples_per_s"], t["samples_per_s"]
# The ratio from the step times (samples/s are rounded in the JSON: 0.03 / 0.015 at 8 x 512).
print(f"{model:10s} {'ftune':8s} {f['ms_per_step']:12.1f} {fs:12.3f} {t['ms_per_step'] / f['ms_per_step']:7.2f}x")
print(f"{model:10s} {'pytorch':8s} {t['ms_per_step']:12.1f} {ts:12.3f} {1.0:7.2f}x")
PY
done
