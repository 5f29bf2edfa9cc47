#!/usr/bin/env bash
# ftune vs PyTorch + HF Trainer (every hand optimisation on) on the GPU, side by side: BERT-base
# (random init, the same initial weights on both sides) and all-MiniLM-L6-v2 (pretrained), bf16 and
# fp32, on the WordNet gloss pairs (.cache/data/wordnet-3k, examples/wordnet_pairs.py). Prints a
# table (model, impl, precision, samples/s, real tokens/s, MFU, peak memory, ftune/HF) and writes
# bench/results/gpu_vs_hf.md. The logic and the timing rules are in bench/gpu_vs_hf.py.
#   bench/gpu_vs_hf.sh [--quick | --steps N] [--cpu] [--ftune BIN] [gpu_vs_hf.py options...]
#     --quick    60 optimizer steps per run (default: 2 epochs, 512 steps, as the main job)
#     --steps N  N optimizer steps per run
#     --cpu      a smoke run on the CPU (both sides; writes bench/results/gpu_vs_hf_cpu_smoke.md)
#     --ftune    the ftune binary (default: $FTUNE_BIN, else build-gpu/ftune, else build/ftune)
# Needs Python with torch + transformers; no network (the random BERT-base is written locally).
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
device=cuda
ftune="${FTUNE_BIN:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) args+=(--steps 60); shift ;;
    --steps) args+=(--steps "$2"); shift 2 ;;
    --cpu) device=cpu; args+=(--threads "$(nproc)"); shift ;;
    --ftune) ftune="$2"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
if [ -z "$ftune" ]; then
  for b in build-gpu/ftune build/ftune; do [ -x "$b" ] && { ftune="$b"; break; }; done
fi
[ -n "$ftune" ] && [ -x "$ftune" ] || { echo "gpu_vs_hf: no ftune binary (build it, or --ftune BIN)"; exit 1; }
exec python3 bench/gpu_vs_hf.py --ftune "$ftune" --device "$device" "${args[@]}"
