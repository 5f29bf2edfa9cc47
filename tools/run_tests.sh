#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs dependencies, builds (with the CUDA backend when
# nvcc is present, so CUDA code is compiled even where no GPU can run it) and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
BUILD="${FTUNE_BUILD_DIR:-build}"
JOBS="${FTUNE_JOBS:-$(nproc)}"
export PATH="$PATH:/usr/local/cuda/bin"
# CUDA architectures: the test command builds for the GPU it can run on ("native" where nvidia-smi
# lists one); without a GPU (CI) nothing CUDA runs, so one architecture, sm_80 (the floor of the
# release list, which no kernel has per-architecture code beyond), proves every kernel compiles at a
# fifth of the five-architecture cost. FTUNE_CUDA_ARCHS overrides; a plain cmake configure keeps
# the release fat binary (CMakeLists.txt: 80;86;89;90;120).
ARCHS="${FTUNE_CUDA_ARCHS:-}"
if [ -z "$ARCHS" ]; then
  if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then ARCHS=native; else ARCHS=80; fi
fi
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCHS"
cmake --build "$BUILD" -j "$JOBS"
export FTUNE_MINILM_DIR="${FTUNE_MINILM_DIR:-${FTUNE_CACHE:-$PWD/.cache}/models/all-MiniLM-L6-v2}"
ctest --test-dir "$BUILD" -j "$JOBS" --output-on-failure
