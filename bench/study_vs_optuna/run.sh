#!/usr/bin/env bash
# A whole study, ftune against Optuna + HF Trainer, on this machine, one after the other with the
# same wall-clock budget (issue 36). From the repository root:
#
#   bash bench/study_vs_optuna/run.sh [--budget-min 120] [--seeds "0 1 2"] [--lower 0.2] [--quick]
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
# Needs build/ftune (tools/run_tests.sh or cmake) and makes its peer environment in
# .cache/peer-venv (torch, transformers, accelerate, optuna, pinned) unless FTUNE_PEER_PYTHON
# names one. Results: runs/study-vs-optuna/<seed>/ (logs, runs) and, kept in the repository, a row
# of bench/results/study_vs_optuna.md and bench/results/study_vs_optuna/<date>-seed<k>[-lower<F>]/:
# curves.svg (best mean F1 against minutes), trials.md (every trial of both engines, one line each)
# and both studies' exports (ftune.json, peer.json: compare.py reads them again).
# The row's load is the mean of the 1-minute load average sampled each minute during the studies.
# Compute is compared in minutes and in training rows (epochs x rows over every trial's folds: a
# count the machine's load does not change), and estimated for one GPU from those rows and the
# samples/s of MiniLM that the GPU kit measured for both engines (H200, 2026-11-26: ftune 3,663,
# HF Trainer 1,870 at batch 32 of ~23-token pairs; evaluation and start-up left out).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUDGET_MIN=120 SEEDS="0" POOL_GROUPS=800 FOLDS=5 QUICK=0 TRIALS=() LOWER="" PEER_LOWER=()
while [ $# -gt 0 ]; do
  case "$1" in
    --budget-min) BUDGET_MIN="$2"; shift 2 ;;
    --seeds) SEEDS="$2"; shift 2 ;;
    --groups) POOL_GROUPS="$2"; shift 2 ;;
    --lower) LOWER="$2" PEER_LOWER=(--lower "$2"); shift 2 ;;
    --quick) QUICK=1 BUDGET_MIN=4 POOL_GROUPS=120 FOLDS=2 TRIALS=(--trials 2); shift ;;
    *) echo "run.sh: unknown option $1 (expected --budget-min N, --seeds \"0 1\", --groups N, --lower F, --quick)" >&2; exit 2 ;;
  esac
done
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

for seed in $SEEDS; do
  OUT=runs/study-vs-optuna/$seed
  rm -rf "$OUT" && mkdir -p "$OUT"
  # ftune: the search file with this run's storage, seed and folds.
  sed -e "s|sqlite:///runs/study-vs-optuna/ftune.db|sqlite:///$OUT/ftune.db|" -e "s|^seed: 0|seed: $seed|" \
      -e "s|^folds: 5|folds: $FOLDS|" -e "s|train_config: train.yaml|train_config: $PWD/bench/study_vs_optuna/train.yaml|" \
      bench/study_vs_optuna/search.yaml >"$OUT/search.yaml"
  if [ -n "$LOWER" ]; then
    sed -i "s|^pruner: {\(.*\)}|pruner: {\1, lower: $LOWER}|" "$OUT/search.yaml"
    grep -q "lower: $LOWER}" "$OUT/search.yaml" || { echo "run.sh: could not set the pruner's lower bound" >&2; exit 1; }
  fi
  echo "fixed: {output.dir: $OUT/ftune}" >>"$OUT/search.yaml"
  # The machine's load during the two studies (not during the untimed final fits).
  (while sleep 60; do cut -d' ' -f1 /proc/loadavg; done) >"$OUT/load.txt" &
  LOAD_PID=$!
  trap 'kill "$LOAD_PID" 2>/dev/null || true' EXIT  # a failed step must not leave it sampling
  day=$(date -u +%F)
  echo "seed $seed: ftune study ($(date -u +%H:%M:%S))"
  "$FTUNE" hpo run --config "$OUT/search.yaml" --timeout "$BUDGET_S" "${TRIALS[@]}" \
    >"$OUT/ftune.log" 2>&1 || echo "ftune hpo run exited $? (see $OUT/ftune.log)"
  "$FTUNE" hpo export --config "$OUT/search.yaml" --format json --output "$OUT/ftune.json"
  echo "seed $seed: Optuna + HF Trainer study ($(date -u +%H:%M:%S))"
  "$PY" bench/study_vs_optuna/peer.py --model "$MODEL" --train "$DATA/train.jsonl" \
    --out "$OUT/peer.json" --budget-s "$BUDGET_S" --folds "$FOLDS" --study-seed "$seed" "${TRIALS[@]}" "${PEER_LOWER[@]}" \
    --scratch "$OUT/peer-scratch" >"$OUT/peer.log" 2>&1
  kill "$LOAD_PID" 2>/dev/null || true
  wait "$LOAD_PID" 2>/dev/null || true
  load=$(awk '{s += $1; n++} END {if (n) printf "%.2f", s / n; else print "-"}' "$OUT/load.txt")
  # Final fits: each engine's best params on the whole pool, scored on the held-out test split.
  ft_params=$(python3 -c "import json,sys; j=json.load(open('$OUT/ftune.json')); b=[t for t in j['trials'] if t['state']=='COMPLETE']; b or sys.exit('run.sh: no complete trial in $OUT/ftune.json: no final fit'); b=max(b,key=lambda t:t['value']); print(' '.join(f'{k}={v}' for k,v in b['params_external'].items()))")
  "$FTUNE" train --config bench/study_vs_optuna/train.yaml $ft_params data.test="$DATA/test.jsonl" \
    output.dir="$OUT/ftune-final" >"$OUT/ftune-final.log" 2>&1
  ft_test=$(python3 -c "import json; print(json.load(open('$OUT/ftune-final/summary.json'))['test']['f1'])")
  peer_params=$(python3 -c "import json,sys; j=json.load(open('$OUT/peer.json')); b=[t for t in j['trials'] if t['state']=='COMPLETE']; b or sys.exit('run.sh: no complete trial in $OUT/peer.json: no final fit'); print(json.dumps(max(b,key=lambda t:t['value'])['params']))")
  peer_test=$("$PY" bench/study_vs_optuna/peer.py --model "$MODEL" --train "$DATA/train.jsonl" \
    --test "$DATA/test.jsonl" --final "$peer_params" --scratch "$OUT/peer-scratch" 2>"$OUT/peer-final.log" |
    tail -1 | python3 -c "import json,sys; print(json.load(sys.stdin)['test_f1'])")
  KEEP=$OUT/results
  [ "$QUICK" = 1 ] || KEEP=bench/results/study_vs_optuna/$day-seed$seed${LOWER:+-lower$LOWER}
  mkdir -p "$KEEP"
  cp "$OUT/ftune.json" "$OUT/peer.json" "$KEEP/"
  python3 bench/study_vs_optuna/compare.py --ftune "$OUT/ftune.json" --peer "$OUT/peer.json" \
    --budget-s "$BUDGET_S" --ftune-test-f1 "$ft_test" --peer-test-f1 "$peer_test" \
    --label "seed $seed${LOWER:+, lower $LOWER}, $day, load $load" \
    --markdown "$RESULTS" --svg "$KEEP/curves.svg" --trials-md "$KEEP/trials.md" \
    --gpu-kit bench/results/gpu/2026-11-26-h200-run2.json
done
echo "rows appended to $RESULTS; curves, trials and both exports in ${KEEP%/*}/"
