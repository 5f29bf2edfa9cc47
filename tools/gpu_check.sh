#!/usr/bin/env bash
# GPU check: builds ftune with the CUDA backend for the GPU of this machine and runs every test
# binary, whose device-parametrised tests then run on the GPU against the CPU results; then the
# end-to-end CPU/GPU parity (tools/gpu_parity.py): 50 training steps, fp32, dropout on, on CPU and
# on cuda, per-step losses within 1e-4 relative, with a tiny random BERT and, when present,
# all-MiniLM-L6-v2 (.cache/models/all-MiniLM-L6-v2, tools/fetch_minilm.sh). Prints a table of the
# CUDA test cases and the parity lines last. Ops without a CUDA kernel yet fail their CUDA cases
# with "no CUDA kernel yet": that is the CUDA backend issue's list of work, shown rather than
# hidden.
#   bash tools/gpu_check.sh [build-dir]
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build-gpu}"
export PATH="$PATH:/usr/local/cuda/bin"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || { echo "no GPU visible"; exit 1; }
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFTUNE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native \
  -DFTUNE_BUILD_BENCH=ON || exit 1
cmake --build "$BUILD" -j "$(nproc)" || exit 1
"$BUILD/ftune" doctor
status=0
report=$(mktemp)
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  "$t" --gtest_brief=1 > "$report.$(basename "$t")" 2>&1 || status=1
  # One row per CUDA test case: the suite, the case and its result.
  "$t" --gtest_filter='*/cuda*' --gtest_brief=0 2>&1 | awk -v bin="$(basename "$t")" '
    /^\[       OK \]/ {print bin, $4, "passed"} /^\[  FAILED  \].*cuda/ {print bin, $4, "FAILED"}' >> "$report"
done
parity=$(mktemp)
python3 tools/gpu_parity.py --ftune "$BUILD/ftune" --steps 50 >> "$parity" 2>&1 || status=1
MINILM=.cache/models/all-MiniLM-L6-v2
if [ -f "$MINILM/model.safetensors" ]; then
  python3 tools/gpu_parity.py --ftune "$BUILD/ftune" --model "$MINILM" --steps 50 \
    >> "$parity" 2>&1 || status=1
else
  echo "parity all-MiniLM-L6-v2: skipped ($MINILM not present; tools/fetch_minilm.sh)" >> "$parity"
fi
echo
echo "CUDA test cases (binary, case, result):"
sort -u "$report" | column -t
grep -h "no CUDA kernel yet" "$report".* | sed 's/.*: \([a-z_]*\): no CUDA kernel yet.*/\1/' | sort -u | tr '\n' ' ' |
  sed 's/^/ops without a CUDA kernel yet: /'; echo
echo
echo "CPU/GPU end-to-end parity (fp32, dropout on, per-step training loss):"
cat "$parity"
exit $status
