#!/usr/bin/env bash
# Fingerprints of training runs on fixed configs, for refactors of the step that must not change
# behaviour: each run's per-step logged numbers (losses, gradient norms, learning rates,
# validation metrics; timings left out), the bytes of its final weights and its last checkpoint's
# resume state (timings and input fingerprints left out), printed as one line per run. Run it with the ftune binary before and after a change and diff the two outputs: any
# difference is a behaviour change (the runs are bit-exact on the CPU).
#
#   tools/step_fingerprint.sh BUILD/ftune WORKDIR [MODEL_DIR] > fingerprints.txt
#
# Runs on the CPU, 1 thread a process: fp32 (clipping on), gradient accumulation with layer decay,
# an injected non-finite step and an injected out-of-memory fallback, fp16 loss scaling (the CPU
# emulation, a start scale that overflows), LoRA with packed micro-batches, data parallel over 2
# ranks (mpirun) with an out-of-memory fallback after the last backward, and a run killed
# mid-step and resumed. MODEL_DIR: a BERT checkpoint with a tokenizer (default: the cached
# all-MiniLM-L6-v2).
set -euo pipefail
ftune="$(realpath "$1")"
work="$2"
model="${3:-/work/main/.cache/models/all-MiniLM-L6-v2}"
rm -rf "$work" && mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none

python3 - "$work" <<'PY'
import json, random, sys
words = ["red", "green", "car", "house", "bird", "apple", "river", "chair", "book", "cloud"]
def task(path, n, seed):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            good = rng.random() < 0.5
            text = "the " + " ".join(rng.choice(words) for _ in range(rng.randint(1, 5)))
            pair = ("good" if good else "bad") + "".join(
                " " + rng.choice(words) for _ in range(rng.randint(0, 3)))
            f.write(json.dumps({"text": text, "text_pair": pair, "label": int(good)}) + "\n")
task(sys.argv[1] + "/train.jsonl", 45, 1)
task(sys.argv[1] + "/val.jsonl", 12, 2)
PY

# config NAME "training lines" ["extra sections"]: writes WORK/NAME.yaml
config() {
  cat > "$work/$1.yaml" <<YAML
model:
  path: $model
data:
  train: $work/train.jsonl
  validation: $work/val.jsonl
  max_length: 20
training:
  epochs: 1
  learning_rate: 1.0e-4
  log_every: 1
  threads: 1
  hidden_dropout: 0.1
  attention_dropout: 0.1
$2
eval:
  every_steps: 5
checkpoint:
  keep_last: 20
output:
  dir: $work/$1
  progress: plain
${3:-}
YAML
}

# fingerprint NAME: one line with the run's logged numbers and its final weights' hash.
fingerprint() {
  local dir="$work/$1"
  local metrics weights
  metrics="$(python3 - "$dir/metrics.jsonl" <<'PY'
import json, re, sys
timing = re.compile(r"_per_s$|fraction|seconds|elapsed|time|memory|bytes")
for line in open(sys.argv[1]):
    row = json.loads(line)
    print(json.dumps({k: v for k, v in sorted(row.items()) if not timing.search(k)}))
PY
)"
  weights="$(sha256sum "$dir/model/model.safetensors" | cut -c1-16)"
  # The last checkpoint's resume state (trainer_state.json) less its timings and fingerprints.
  state="$(python3 - "$dir/checkpoints" <<'PY'
import json, os, sys
last = sorted(d for d in os.listdir(sys.argv[1]) if d.startswith("step-"))[-1]
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if "seconds" not in k and k != "fingerprints"}
    return x
state = json.load(open(os.path.join(sys.argv[1], last, "trainer_state.json")))
print(last, json.dumps(strip(state), sort_keys=True))
PY
)"
  printf '%s steps=%s metrics=%s weights=%s state=%s\n' "$1" \
    "$(printf '%s\n' "$metrics" | grep -c '"train"')" \
    "$(printf '%s' "$metrics" | sha256sum | cut -c1-16)" "$weights" \
    "$(printf '%s' "$state" | sha256sum | cut -c1-16)"
  printf '%s\n' "$metrics" > "$work/$1.metrics"
}

train() {  # train NAME [env...]: a run of WORK/NAME.yaml in one process
  local name="$1"; shift
  env "$@" "$ftune" train --config "$work/$name.yaml" > "$work/$name.log" 2>&1
}

config fp32 "  batch_size: 4"
train fp32
fingerprint fp32

config accum "  batch_size: 2
  gradient_accumulation: 3
  layer_decay: 0.8
  max_grad_norm: 0.5"
train accum FTUNE_DEBUG_NONFINITE_STEPS=4 FTUNE_DEBUG_OOM_AT_STEP=3
grep -q "out of memory at step 3" "$work/accum.log" || { echo "accum: no fallback" >&2; exit 1; }
fingerprint accum

config fp16 "  batch_size: 4
  gradient_accumulation: 2
  precision: fp16"
sed -i 's/^  epochs: 1$/  epochs: 2/' "$work/fp16.yaml"
train fp16 FTUNE_DEBUG_LOSS_SCALE=28
grep -q "fp16 gradients overflow" "$work/fp16.log" || { echo "fp16: no overflow" >&2; exit 1; }
fingerprint fp16

config lora_packed "  batch_size: 4
  gradient_accumulation: 2
  learning_rate: 1.0e-3" "peft:
  method: lora
  r: 4
  alpha: 8
  dropout: 0.1
  target_modules: all-linear"
sed -i 's/^  max_length: 20$/  max_length: 20\n  packing: on/' "$work/lora_packed.yaml"
sed -i '0,/^  learning_rate: 1.0e-4$/{/^  learning_rate: 1.0e-4$/d}' "$work/lora_packed.yaml"
train lora_packed
fingerprint lora_packed

config dp2 "  batch_size: 2
  gradient_accumulation: 2"
FTUNE_DEBUG_OOM_AT_STEP=3:backward timeout -k 10 300 mpirun --oversubscribe --bind-to none -np 2 \
  "$ftune" train --config "$work/dp2.yaml" > "$work/dp2.log" 2>&1
grep -q "out of memory at step 3" "$work/dp2.log" || { echo "dp2: no fallback" >&2; exit 1; }
fingerprint dp2

config resume "  batch_size: 2
  gradient_accumulation: 2"
train resume FTUNE_DEBUG_EXIT_AT_MICRO_STEP=21 || true  # killed inside step 6 (exit 137)
"$ftune" train --config "$work/resume.yaml" --resume > "$work/resume2.log" 2>&1
grep -q "resumed from" "$work/resume2.log" || { echo "resume: the run did not resume" >&2; exit 1; }
fingerprint resume
