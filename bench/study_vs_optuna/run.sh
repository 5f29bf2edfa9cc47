#!/usr/bin/env bash
# A whole study, ftune against Optuna + HF Trainer, on this machine, one after the other with the
# same wall-clock budget (issue 36). From the repository root:
#
#   bash bench/study_vs_optuna/run.sh [--budget-min 120] [--seeds "0 1 2"] [--lower 0.2]
#                                     [--engine both|ftune|peer] [--quick]
#
# Builds the data (sentence / definition matching from WordNet, make_data.py over
# examples/wordnet_pairs.py: --groups sentences of the training split as the study's pool, 3 pairs
# each: the gold definition, another sense of the word, a random other word's; the lemma-disjoint
# test split held out, built the same way), then per seed: ftune's study (search.yaml over train.yaml, `ftune hpo run --timeout`), the
# peer's (peer.py, `study.optimize(timeout=...)`), a final fit of each engine's best params on the
# whole pool scored on the test split, and compare.py's row. --quick: 120 sentences, 2 folds, at
# most 2 trials per engine in a 4-minute budget (a smoke test of the whole chain, not a measurement).
# --lower F: both engines prune a trial whose report falls below F, start-up trials included
# (ftune: `lower` on its median pruner, docs/hpo.md "Bounds"; the peer: Optuna's ThresholdPruner
# beside its MedianPruner, peer.py's EitherPruner); without it, search.yaml's pruner as committed.
# --engine ftune|peer: one engine's side only (its study and final fit), so that a seed whose two
# studies and fits do not fit one sitting (2 h per engine is ~4.5 h of machine) runs in two: the
# halves meet in bench/results/study_vs_optuna/<budget>min-seed<k>[-lower<F>]/, the second writes
# the row, and each half records its machine, start and load there (<engine>-run.txt; the row says
# when the machines differ).
# Needs build/ftune (tools/run_tests.sh or cmake) and makes its peer environment in
# .cache/peer-venv (torch, transformers, accelerate, optuna, pinned) unless FTUNE_PEER_PYTHON
# names one. Results: runs/study-vs-optuna/<seed>/ (logs, runs) and, kept in the repository, a row
# of bench/results/study_vs_optuna.md and bench/results/study_vs_optuna/<date>-seed<k>[-lower<F>]/:
# curves.svg (best mean F1 against minutes), trials.md (every trial of both engines, one line each),
# both studies' exports (ftune.json, peer.json: compare.py reads them again), each engine's test F1
# and run record. The row's load is each engine's mean 1-minute load average during its study.
# Compute is compared in minutes and in training rows (epochs x rows over every trial's folds: a
# count the machine's load does not change), and estimated for one GPU from those rows and the
# samples/s of MiniLM that the GPU kit measured for both engines (H200, 2026-11-26: ftune 3,663,
# HF Trainer 1,870 at batch 32 of ~23-token pairs; evaluation and start-up left out).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUDGET_MIN=120 SEEDS="0" POOL_GROUPS=800 FOLDS=5 QUICK=0 TRIALS=() LOWER="" PEER_LOWER=() ENGINE=both
while [ $# -gt 0 ]; do
  case "$1" in
    --budget-min) BUDGET_MIN="$2"; shift 2 ;;
    --seeds) SEEDS="$2"; shift 2 ;;
    --groups) POOL_GROUPS="$2"; shift 2 ;;
    --lower) LOWER="$2" PEER_LOWER=(--lower "$2"); shift 2 ;;
    --engine) ENGINE="$2"; shift 2 ;;
    --quick) QUICK=1 BUDGET_MIN=4 POOL_GROUPS=120 FOLDS=2 TRIALS=(--trials 2); shift ;;
    *) echo "run.sh: unknown option $1 (expected --budget-min N, --seeds \"0 1\", --groups N, --lower F, --engine both|ftune|peer, --quick)" >&2; exit 2 ;;
  esac
done
case "$ENGINE" in both | ftune | peer) ;; *) echo "run.sh: --engine must be both, ftune or peer, got '$ENGINE'" >&2; exit 2 ;; esac
BUDGET_S=$((BUDGET_MIN * 60))
FTUNE=build/ftune
[ -x "$FTUNE" ] || { echo "run.sh: $FTUNE is missing: build first (bash tools/run_tests.sh)" >&2; exit 2; }
bash tools/fetch_minilm.sh >/dev/null
MODEL=.cache/models/all-MiniLM-L6-v2
PY="${FTUNE_PEER_PYTHON:-}"
if [ -z "$PY" ]; then
  PY=.cache/peer-venv/bin/python
  if [ ! -x "$PY" ]; then
    python3 -m venv .cache/peer-venv
    .cache/peer-venv/bin/pip install --quiet "torch==2.15.0" "transformers==5.25.0" \
      "accelerate==1.16.0" "optuna==5.1.0"
  fi
fi
DATA=.cache/data/study-matching
python3 examples/wordnet_pairs.py --out "$DATA/wordnet" --seed 13 --max-train-groups "$POOL_GROUPS" \
  --max-eval-groups 300 --quiet
python3 bench/study_vs_optuna/make_data.py "$DATA/wordnet" "$DATA"
[ -s "$DATA/train.jsonl" ] || { echo "run.sh: $DATA/train.jsonl is empty" >&2; exit 1; }
echo "data: $(wc -l <"$DATA/train.jsonl") pairs in the study's pool, $(wc -l <"$DATA/test.jsonl") held out; budget ${BUDGET_MIN} min per engine; load: $(cut -d' ' -f1-3 /proc/loadavg)"
RESULTS=bench/results/study_vs_optuna.md
[ "$QUICK" = 1 ] && RESULTS=runs/study-vs-optuna/quick.md

# One engine's side of a seed: its study under the budget (the 1-minute load sampled each minute
# during it), its best parameters trained on the whole pool and scored on the test split; what the
# comparison reads goes to $KEEP: <engine>.json, <engine>-test-f1.txt, <engine>-run.txt (machine,
# start, mean load).
study_side() {
  local engine=$1 seed=$2 OUT=$3 KEEP=$4
  (while sleep 60; do cut -d' ' -f1 /proc/loadavg; done) >"$OUT/$engine-load.txt" &
  LOAD_PID=$!
  trap 'kill "$LOAD_PID" 2>/dev/null || true' EXIT  # a failed step must not leave it sampling
  local started
  started=$(date -u '+%F %H:%M')
  echo "seed $seed: $engine study ($(date -u +%H:%M:%S))"
  if [ "$engine" = ftune ]; then
    rm -rf "$OUT/ftune" "$OUT/ftune.db"* "$OUT/ftune-final"
    sed -e "s|sqlite:///runs/study-vs-optuna/ftune.db|sqlite:///$OUT/ftune.db|" -e "s|^seed: 0|seed: $seed|" \
        -e "s|^folds: 5|folds: $FOLDS|" -e "s|train_config: train.yaml|train_config: $PWD/bench/study_vs_optuna/train.yaml|" \
        bench/study_vs_optuna/search.yaml >"$OUT/search.yaml"
    if [ -n "$LOWER" ]; then
      sed -i "s|^pruner: {\(.*\)}|pruner: {\1, lower: $LOWER}|" "$OUT/search.yaml"
      grep -q "lower: $LOWER}" "$OUT/search.yaml" || { echo "run.sh: could not set the pruner's lower bound" >&2; exit 1; }
    fi
    echo "fixed: {output.dir: $OUT/ftune}" >>"$OUT/search.yaml"
    "$FTUNE" hpo run --config "$OUT/search.yaml" --timeout "$BUDGET_S" "${TRIALS[@]}" \
      >"$OUT/ftune.log" 2>&1 || echo "ftune hpo run exited $? (see $OUT/ftune.log)"
    "$FTUNE" hpo export --config "$OUT/search.yaml" --format json --output "$OUT/ftune.json"
  else
    rm -rf "$OUT/peer-scratch"
    "$PY" bench/study_vs_optuna/peer.py --model "$MODEL" --train "$DATA/train.jsonl" \
      --out "$OUT/peer.json" --budget-s "$BUDGET_S" --folds "$FOLDS" --study-seed "$seed" "${TRIALS[@]}" "${PEER_LOWER[@]}" \
      --scratch "$OUT/peer-scratch" >"$OUT/peer.log" 2>&1
  fi
  kill "$LOAD_PID" 2>/dev/null || true
  wait "$LOAD_PID" 2>/dev/null || true
  trap - EXIT
  local load
  load=$(awk '{s += $1; n++} END {if (n) printf "%.2f", s / n; else print "-"}' "$OUT/$engine-load.txt")
  # The final fit: the best params on the whole pool, scored on the held-out test split.
  local params test_f1
  if [ "$engine" = ftune ]; then
    params=$(python3 -c "import json,sys; j=json.load(open('$OUT/ftune.json')); b=[t for t in j['trials'] if t['state']=='COMPLETE']; b or sys.exit('run.sh: no complete trial in $OUT/ftune.json: no final fit'); b=max(b,key=lambda t:t['value']); print(' '.join(f'{k}={v}' for k,v in b['params_external'].items()))")
    "$FTUNE" train --config bench/study_vs_optuna/train.yaml $params data.test="$DATA/test.jsonl" \
      output.dir="$OUT/ftune-final" >"$OUT/ftune-final.log" 2>&1
    test_f1=$(python3 -c "import json; print(json.load(open('$OUT/ftune-final/summary.json'))['test']['f1'])")
  else
    params=$(python3 -c "import json,sys; j=json.load(open('$OUT/peer.json')); b=[t for t in j['trials'] if t['state']=='COMPLETE']; b or sys.exit('run.sh: no complete trial in $OUT/peer.json: no final fit'); print(json.dumps(max(b,key=lambda t:t['value'])['params']))")
    test_f1=$("$PY" bench/study_vs_optuna/peer.py --model "$MODEL" --train "$DATA/train.jsonl" \
      --test "$DATA/test.jsonl" --final "$params" --scratch "$OUT/peer-scratch" 2>"$OUT/peer-final.log" |
      tail -1 | python3 -c "import json,sys; print(json.load(sys.stdin)['test_f1'])")
  fi
  mkdir -p "$KEEP"
  cp "$OUT/$engine.json" "$KEEP/$engine.json"
  echo "$test_f1" >"$KEEP/$engine-test-f1.txt"
  printf 'machine: %s, %s cores\nstarted: %s UTC\nload: %s\n' \
    "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" "$(nproc)" "$started" "$load" \
    >"$KEEP/$engine-run.txt"
}

# A line of an engine's run record in $KEEP: field ENGINE KEY.
field() { sed -n "s/^$2: //p" "$KEEP/$1-run.txt"; }

for seed in $SEEDS; do
  OUT=runs/study-vs-optuna/$seed
  mkdir -p "$OUT"
  sfx=${LOWER:+-lower$LOWER}
  # Where the run is kept: by date for both engines in one go; by budget for one engine at a time
  # (--engine ftune now, --engine peer in another session on the same kind of machine: both
  # halves name the same folder, and the second one writes the row).
  if [ "$QUICK" = 1 ]; then KEEP=$OUT/results
  elif [ "$ENGINE" = both ]; then KEEP=bench/results/study_vs_optuna/$(date -u +%F)-seed$seed$sfx
  else KEEP=bench/results/study_vs_optuna/${BUDGET_MIN}min-seed$seed$sfx
  fi
  # (if, not ||: a function called in an || list would run with set -e off)
  if [ "$ENGINE" != peer ]; then study_side ftune "$seed" "$OUT" "$KEEP"; fi
  if [ "$ENGINE" != ftune ]; then study_side peer "$seed" "$OUT" "$KEEP"; fi
  if [ ! -f "$KEEP/ftune.json" ] || [ ! -f "$KEEP/peer.json" ]; then
    echo "seed $seed: one engine's side is in $KEEP; run.sh --engine $([ "$ENGINE" = ftune ] && echo peer || echo ftune) with the same options writes the row"
    continue
  fi
  ft_day=$(field ftune started | cut -c1-10) peer_day=$(field peer started | cut -c1-10)
  label="seed $seed${LOWER:+, lower $LOWER}, $ft_day"
  [ "$ft_day" = "$peer_day" ] || label+=" / $peer_day"
  label+=", load $(field ftune load) / $(field peer load)"
  [ "$(field ftune machine)" = "$(field peer machine)" ] || label+=", machines differ ($KEEP/*-run.txt)"
  python3 bench/study_vs_optuna/compare.py --ftune "$KEEP/ftune.json" --peer "$KEEP/peer.json" \
    --budget-s "$BUDGET_S" --ftune-test-f1 "$(cat "$KEEP/ftune-test-f1.txt")" \
    --peer-test-f1 "$(cat "$KEEP/peer-test-f1.txt")" --label "$label" \
    --markdown "$RESULTS" --svg "$KEEP/curves.svg" --trials-md "$KEEP/trials.md" \
    --gpu-kit bench/results/gpu/2026-11-26-h200-run2.json
  echo "seed $seed: row appended to $RESULTS; curves, trials and both exports in $KEEP/"
done
