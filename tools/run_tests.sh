#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs dependencies, builds (with the CUDA backend when
# nvcc is present, so CUDA code is compiled even where no GPU can run it) and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
BUILD="${FTUNE_BUILD_DIR:-build}"
JOBS="${FTUNE_JOBS:-$(nproc)}"
export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j "$JOBS"
export FTUNE_MINILM_DIR="${FTUNE_MINILM_DIR:-${FTUNE_CACHE:-$PWD/.cache}/models/all-MiniLM-L6-v2}"
ctest --test-dir "$BUILD" -j "$JOBS" --output-on-failure
