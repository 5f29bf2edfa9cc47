#!/usr/bin/env bash
# Loss bits of short fixed training runs of every family (bench/loss_bits.cc: LoRA, DoRA with
# adapter dropout, full fine-tuning; fp32 and bf16 with checkpointing), one line per step, for
# diffing a refactoring's before and after bit for bit:
#   tools/loss_bits.sh [build dir, default build] > after.txt; diff before.txt after.txt
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
"$build/bench/loss_bits" "$root" "$scratch" "${2:-}" | grep '^LOSS ' | cut -d' ' -f2-
