#!/usr/bin/env bash
# The memory planner's benchmark: for BERT-base at 128 / 256 / 512 tokens, the planned largest
# micro-batch on this machine (budget 0.95 of the available memory) and on 8, 24 and 80 GiB
# devices, then training-step throughput at the planned micro-batch next to a fixed batch of 32
# (train_step_bench: forward, loss, backward, clipping, AdamW; random tokens, no padding).
#   bash bench/memory_plan_bench.sh [build-dir] [steps]
# MAX_ROWS (default 96) caps the timed planned batch so a CPU run stays within minutes; the
# table says when it did.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
STEPS="${2:-2}"
MAX_ROWS="${MAX_ROWS:-96}"
"$BUILD/bench/memory_plan_bench" --model bert-base --memory 8GiB --memory 24GiB --memory 80GiB
echo
"$BUILD/bench/memory_plan_bench" --model bert-base
echo
printf '%-5s %-10s %-14s %-14s %-14s\n' seq planned 'timed batch' 'samples/s' 'samples/s @32'
for seq in 128 256 512; do
  line=$("$BUILD/bench/memory_plan_bench" --model bert-base --seq "$seq" --json)
  planned=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['largest_micro_batch'])" "$line")
  fits32=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['batch_32_fits'])" "$line")
  timed=$(( planned < MAX_ROWS ? planned : MAX_ROWS ))
  rate() {
    "$BUILD/bench/train_step_bench" --model bert-base --batch "$1" --seq "$seq" --steps "$STEPS" \
      --warmup 1 --json | python3 -c "import json,sys; print('%.2f' % json.loads(sys.stdin.read())['samples_per_s'])"
  }
  at_planned=$(rate "$timed")
  if [ "$fits32" = "True" ]; then at32=$(rate 32); else at32="does not fit"; fi
  printf '%-5s %-10s %-14s %-14s %-14s\n' "$seq" "$planned" "$timed" "$at_planned" "$at32"
done
