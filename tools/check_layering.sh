#!/usr/bin/env bash
# The layering rules of src/ (DESIGN.md: layers import only downward), checked with grep:
#   core < io < cuda, text < ops < data < models < optim, dist < train < hpo < report < dashboard
#   < cli
# where layers of one rank are siblings that include neither the other: cuda and text; optim
# (AdamW, clipping, schedules, layer decay, loss scaling, the step scalars) and dist (the process
# group, the reduce transports, the gradient reducer), which both build on models' parameter
# tables; plus the rules of the backbone interface (models/backbone.h):
#   - no EncoderConfig (the BERT family's config type) outside src/models/bert/ and the family
#     registry (nor in bench/)
#   - train/ sets TF32 and the attention kernel through ops/backend_context.h only
# and the rule of the shared layer blocks (models/layers/): a layer under the model families, so
# it includes, of models/, only itself and the shared model code below it (adapters, adapter
# math, the backbone interface, buffer and parameter plumbing), never a family's files.
# And the rule of the family folders (every folder of models/ but layers/: bert/, deberta/, ...):
# they are leaves. Of src/ and bench/, only a family's own files and the family registry
# (models/model_registry.cc, the one place that builds families) include a family folder; no
# family includes another's. Everything else holds a ModelSpec (models/backbone.h).
# Prints every violation with its file and line; exits 1 if there is any.
set -u
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
status=0
rank() {
  case "$1" in
    core) echo 0 ;; io) echo 1 ;; cuda|text) echo 2 ;; ops) echo 3 ;; data) echo 4 ;;
    models) echo 5 ;; optim|dist) echo 6 ;; train) echo 7 ;; hpo) echo 8 ;; report) echo 9 ;;
    dashboard) echo 10 ;; cli) echo 11 ;; *) echo -1 ;;
  esac
}
fail() { echo "layering: $*"; status=1; }

for dir in src/*/; do
  layer="$(basename "$dir")"
  mine="$(rank "$layer")"
  [ "$mine" -ge 0 ] || { fail "$dir is not a known layer"; continue; }
  while IFS= read -r hit; do
    [ -n "$hit" ] || continue
    target="$(printf '%s' "$hit" | sed -E 's/.*#include "([a-z_]+)\/.*/\1/')"
    theirs="$(rank "$target")"
    [ "$theirs" -ge 0 ] || continue
    if [ "$theirs" -gt "$mine" ] || { [ "$theirs" -eq "$mine" ] && [ "$target" != "$layer" ]; }; then
      fail "$hit  ($layer must not include $target)"
    fi
  done < <(grep -rnE '^#include "[a-z_]+/' "$dir" || true)
done

while IFS= read -r hit; do
  [ -n "$hit" ] && fail "$hit  (EncoderConfig outside src/models/bert and the registry: hold a ModelSpec)"
done < <(grep -rnw EncoderConfig src bench | grep -vE '^src/models/(bert/|model_registry\.cc:)' || true)

while IFS= read -r hit; do
  [ -n "$hit" ] && fail "$hit  (train/ sets TF32 and attention through ops/backend_context.h)"
done < <(grep -rnE 'set_gemm_tf32|gemm_tf32\(\)|set_attention_kernel|#include "cuda/gemm.h"' src/train || true)

# models/layers/ may include these of models/ (the shared code under the families), and itself.
layers_may_include='models/(layers/[a-z_]+|adapter_config|adapter_site|adapters|backbone|gradient_ready|param_table|batch)\.h'
while IFS= read -r hit; do
  [ -n "$hit" ] || continue
  printf '%s' "$hit" | grep -qE "#include \"$layers_may_include\"" ||
    fail "$hit  (models/layers/ is under the families: it includes no family's files)"
done < <(grep -rnE '^#include "models/' src/models/layers || true)

registry='src/models/model_registry.cc'
while IFS= read -r hit; do
  [ -n "$hit" ] || continue
  file="${hit%%:*}"
  family="$(printf '%s' "$hit" | sed -E 's/.*#include "models\/([a-z0-9_]+)\/.*/\1/')"
  [ "$family" = layers ] && continue
  case "$file" in
    "src/models/$family/"*) ;;
    "$registry") ;;
    *) fail "$hit  (models/$family/ is a family folder: only its own files and $registry include it)" ;;
  esac
done < <(grep -rnE '^#include "models/[a-z0-9_]+/' src bench || true)

[ "$status" -eq 0 ] && echo "layering: ok"
exit "$status"
