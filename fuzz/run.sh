#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan, in build-fuzz/) and runs one of them.
#   fuzz/run.sh build                 configure and build every target
#   fuzz/run.sh TARGET SECONDS [ARGS] build, then fuzz TARGET (e.g. safetensors) for SECONDS under
#                                     nice -n 19; extra ARGS go to libFuzzer (-jobs=2, -seed=1 ...)
# The working corpus and any crash-*/slow-unit-* files go to $FTUNE_FUZZ_WORK/TARGET
# (default /tmp/ftune-fuzz/TARGET); the run ends with libFuzzer's final stats (executions, rate).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${FTUNE_FUZZ_BUILD:-build-fuzz}"
if [ ! -f "$BUILD/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DFTUNE_FUZZ=ON -DFTUNE_CUDA=OFF \
    -DFTUNE_BUILD_TESTS=OFF -DFTUNE_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
if [ "${1:-}" = build ]; then
  nice -n 19 cmake --build "$BUILD" -j "${FTUNE_JOBS:-$(nproc)}"
  exit 0
fi
if [ $# -lt 2 ]; then
  sed -n '2,7p' "$0" >&2
  exit 2
fi
target=$1 seconds=$2
shift 2
nice -n 19 cmake --build "$BUILD" -j "${FTUNE_JOBS:-$(nproc)}" --target "fuzz_$target"
work="${FTUNE_FUZZ_WORK:-/tmp/ftune-fuzz}/$target"
mkdir -p "$work/corpus"
dict=()
[ -f "fuzz/$target.dict" ] && dict=(-dict="fuzz/$target.dict")
extra=()
[ -d "fuzz/regressions/$target" ] && extra=("fuzz/regressions/$target")
exec nice -n 19 "$BUILD/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=60 \
  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/" "${dict[@]}" "$@" \
  "$work/corpus" "fuzz/seeds/$target" "${extra[@]}"
