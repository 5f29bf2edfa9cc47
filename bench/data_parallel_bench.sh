#!/usr/bin/env bash
# Data-parallel training on the CPU (issue 20): 2 ranks x 1 thread (mpirun -np 2) against 1 process
# x 2 threads, on BERT-base-sized steps (a random bert-base: hidden 768, 12 layers; the synthetic
# pair task, max_length 64, effective batch 16 = micro-batch 8 x 2 ranks or x 2 accumulation,
# fp32, dropout on). Prints samples/s of each, and for the ranks the gradient reduction: buckets,
# bytes per step, seconds reducing per step and the fraction of it hidden behind backward
# (summary.json "data_parallel"); each pair of runs is repeated REPEATS times (default 2),
# alternating, so a load that changes shows; writes the table to bench/results/data_parallel.md. A
# benchmark, not a test: the numbers depend on the machine and its load (printed with them).
#   [REPEATS=n] bench/data_parallel_bench.sh [build] [steps] [bucket_mb]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
STEPS="${2:-8}"
BUCKET="${3:-25}"
REPEATS="${REPEATS:-2}"
PY="${FTUNE_PYTHON:-/work/venv-oracle/bin/python}"
OUT="${FTUNE_BENCH_OUT:-/tmp/ftune-dp-bench}"
mkdir -p "$OUT"
"$PY" - "$OUT" <<'PYEOF'
import os, sys
sys.path.insert(0, "tools/gpu_kit")
from kit_models import random_bert, write_pair_task
out = sys.argv[1]
random_bert("bert-base", "tests/fixtures", os.path.join(out, "models"))
if not os.path.exists(os.path.join(out, "pairs.jsonl")):
    write_pair_task(os.path.join(out, "pairs.jsonl"), 2000, seed=1)
PYEOF

common=(model.path="$OUT/models/bert-base" data.train="$OUT/pairs.jsonl" data.max_length=64
        output.overwrite=true output.progress=plain output.tensorboard=false
        training.max_steps="$STEPS" training.effective_batch_size=16 training.batch_size=8
        training.log_every="$STEPS" training.hidden_dropout=0.1 training.precision=fp32
        training.reduce_bucket_mb="$BUCKET" eval.each_epoch=false checkpoint.save_best=false)
printf 'model:\n  path: x\ndata:\n  train: x\n' > "$OUT/run.yaml"
: >"$OUT/load.txt"
for r in $(seq 1 "$REPEATS"); do
  echo "load before repeat $r: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/load.txt"
  "$BUILD/ftune" train --config "$OUT/run.yaml" "${common[@]}" output.dir="$OUT/one-$r" \
    training.threads=2 >"$OUT/one-$r.log" 2>&1
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    OMPI_MCA_btl_vader_single_copy_mechanism=none \
    mpirun -np 2 --oversubscribe --bind-to none "$BUILD/ftune" train --config "$OUT/run.yaml" \
    "${common[@]}" output.dir="$OUT/two-$r" training.threads=1 >"$OUT/two-$r.log" 2>&1
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/load.txt"

python3 - "$OUT" "$STEPS" "$BUCKET" "$REPEATS" <<'PYEOF'
import json, os, sys
out, steps, bucket, repeats = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
lines = [f"CPU, {steps} steps of 16 rows (random bert-base, max_length 64, fp32, dropout 0.1); "
         f"reduce_bucket_mb {bucket}; {repeats} repeats, alternating", "",
         "| repeat | run | samples/s | reduce s/step | exposed s/step | hidden fraction | buckets started in backward |",
         "| --- | --- | --- | --- | --- | --- | --- |"]
ratios = []
for r in range(1, repeats + 1):
    one = json.load(open(os.path.join(out, f"one-{r}", "summary.json")))
    two = json.load(open(os.path.join(out, f"two-{r}", "summary.json")))
    dp = two["data_parallel"]
    ratios.append(two["train_samples_per_s"] / one["train_samples_per_s"])
    lines += [f"| {r} | 1 process x 2 threads | {one['train_samples_per_s']:.3f} | | | | |",
              f"| {r} | 2 ranks x 1 thread (mpirun) | {two['train_samples_per_s']:.3f} | "
              f"{dp['reduce_seconds'] / dp['steps']:.3f} | {dp['exposed_reduce_seconds'] / dp['steps']:.3f} | "
              f"{dp['hidden_fraction']:.0%} | {dp.get('buckets_started_in_backward', '-')} of "
              f"{dp['buckets'] * dp['steps']} |"]
lines += ["", "2 ranks / 1 process: " + ", ".join(f"{x:.2f}x" for x in ratios) +
          f"; {dp['buckets']} buckets, {dp['reduced_bytes_per_step'] / 2**20:.0f} MiB of gradients "
          "summed per step", "", open(os.path.join(out, "load.txt")).read().strip()]
text = "\n".join(lines)
print(text)
with open("bench/results/data_parallel.md", "w") as f:
    f.write("# Data-parallel training on the CPU (bench/data_parallel_bench.sh)\n\n" + text + "\n")
PYEOF
