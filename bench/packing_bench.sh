#!/usr/bin/env bash
# Packed vs padded training on the CPU with the main job's length mix (WordNet gloss pairs,
# examples/wordnet_pairs.py; all-MiniLM-L6-v2, max_length 96, micro-batches of 32 rows, fp32):
#   ftune, data.packing off     padded micro-batches (each to its own longest row, length-bucketed)
#   ftune, data.packing on      the same rows packed back to back, no padding
#   PyTorch + HF                bench/hf_peer_train.py: group_by_length + dynamic padding
#                               (DataCollatorWithPadding), SDPA, fp32, the same threads
#   HF padding-free             DataCollatorWithFlattening with BertForSequenceClassification:
#                               bench/hf_flatten_check.py says whether it works (it does not)
# and prints samples/s, real tokens/s and the padding fraction of each, as a table (also written
# to bench/results/packing.md). A benchmark, not a test: numbers depend on the machine and load.
#   bench/packing_bench.sh [build] [steps] [threads]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
STEPS="${2:-60}"
THREADS="${3:-2}"
PY="${FTUNE_PYTHON:-/work/venv-oracle/bin/python}"
MODEL="${FTUNE_MINILM_DIR:-.cache/models/all-MiniLM-L6-v2}"
DATA=.cache/data/wordnet-3k
OUT="${FTUNE_BENCH_OUT:-/tmp/ftune-packing-bench}"
[ -f "$DATA/test.jsonl" ] ||
  python3 examples/wordnet_pairs.py --out "$DATA" --seed 13 --max-train-groups 3000
mkdir -p "$OUT"

run_ftune() {  # packing
  "$BUILD/ftune" train --config examples/minilm_wordnet.yaml model.path="$MODEL" \
    data.train="$DATA/train.jsonl" data.validation="$DATA/validation.jsonl" data.max_length=96 \
    output.dir="$OUT/ftune-$1" output.overwrite=true output.progress=plain output.tensorboard=false \
    training.max_steps="$STEPS" training.batch_size=32 training.threads="$THREADS" \
    training.log_every="$STEPS" data.packing="$1" eval.each_epoch=false \
    checkpoint.save_best=false >"$OUT/ftune-$1.log" 2>&1
}
run_ftune off
run_ftune on
"$PY" bench/hf_peer_train.py --model "$MODEL" --max-steps "$STEPS" --device cpu \
  --threads "$THREADS" --no-bf16 --batch 32 --eval-limit 64 >"$OUT/hf.log" 2>&1 || true
"$PY" bench/hf_flatten_check.py --model "$MODEL" >"$OUT/flatten.log" 2>&1 || true

python3 - "$OUT" "$STEPS" "$THREADS" <<'EOF'
import json, os, sys
out, steps, threads = sys.argv[1], sys.argv[2], sys.argv[3]
def last_json(path):
    try:
        lines = [l for l in open(path) if l.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except OSError:
        return None
rows = []
for packing in ("off", "on"):
    s = json.load(open(os.path.join(out, f"ftune-{packing}", "summary.json")))
    rows.append((f"ftune, data.packing {packing}", s["train_samples_per_s"],
                 s["train_tokens_per_s"], s["padding_fraction"]))
hf = last_json(os.path.join(out, "hf.log"))
if hf:
    real = hf.get("real_tokens_per_s") or hf.get("tokens_per_s")
    pad = None
    if hf.get("padded_tokens_per_sample") and hf.get("real_tokens_per_sample"):
        pad = 1 - hf["real_tokens_per_sample"] / hf["padded_tokens_per_sample"]
    rows.append(("PyTorch + HF, dynamic padding", hf.get("samples_per_s"), real, pad))
flat = last_json(os.path.join(out, "flatten.log"))
fmt = lambda v, f: "n/a" if v is None else f.format(v)
lines = [f"CPU, {threads} threads, {steps} steps of 32 rows (MiniLM-L6, WordNet pairs, max_length 96, fp32)",
         "", "| run | samples/s | real tokens/s | padding fraction |", "| --- | --- | --- | --- |"]
for name, sps, tps, pad in rows:
    lines.append(f"| {name} | {fmt(sps, '{:.1f}')} | {fmt(tps, '{:.0f}')} | {fmt(pad, '{:.1%}')} |")
base = rows[0]
lines += ["", f"packed / padded samples/s: {rows[1][1] / base[1]:.2f}x; padding avoided: "
          f"{base[3]:.1%} of the padded run's computed tokens"]
if flat:
    lines += ["", "HF DataCollatorWithFlattening (transformers {}):".format(flat["transformers"])]
    for impl, r in flat["attention"].items():
        if not r.get("available"):
            lines.append(f"- {impl}: unavailable ({r['why']})")
        elif not r.get("runs"):
            lines.append(f"- {impl}: fails ({r['why']})")
        else:
            lines.append(f"- {impl}: {r['predictions']} prediction(s) for {r['rows']} rows; "
                         f"rows attend across each other: {r['leaks_across_rows']} "
                         f"(row 2 differs from alone by {r['row2_max_abs_diff_vs_alone']:.3g})")
text = "\n".join(lines)
print(text)
with open("bench/results/packing.md", "w") as f:
    f.write("# Packed vs padded training (bench/packing_bench.sh)\n\n" + text + "\n")
EOF
