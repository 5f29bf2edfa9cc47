#!/usr/bin/env bash
# The GPU kit's one command on the GPU machine (tools/gpu_kit.sh builds the kit and copies this
# file into it). No build, no network:
#   bash .cache/gpu-kit/run.sh [--out DIR] [--stages tests,parity,...] [--cpu]
# 1. unpacks the kit (its .tar.xz parts) into a scratch directory; checks glibc; finds the CUDA
#    libraries the kit's programs need on this machine (the nvidia-* packages of its PyTorch
#    environment first, then its CUDA toolkit, then the driver's) and refuses, with one line, if
#    one is missing; prints nvidia-smi and `ftune doctor`;
# 2. runs the stages, each under its own time limit (they add up to 15.5 minutes with the
#    preflight: name a few at a time with --stages, docs/gpu.md), each appending its section to $OUT/gpu-report.md and its entry to
#    $OUT/gpu-report.json as it finishes (a stage killed at its limit keeps what it wrote);
# 3. prints one short table last; exit status 0 when every stage passed.
# --cpu runs the same stages on the CPU at smoke sizes (the selfcheck does, with the system's
# copies of the bundled libraries hidden: FTUNE_KIT_HIDE names the LD_AUDIT module).
# --prepare-only unpacks and finds the libraries, prints `work: DIR` and `device-dirs: D1:D2`.
# FTUNE_KIT_PYTHON picks the Python (default /opt/torch/.venv/bin/python3, else python3).
set -uo pipefail
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT="${OUT:-$PWD/gpu-kit-out}"
DEVICE=cuda
ONLY=""
PREPARE_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --stages) ONLY="$2"; shift 2 ;;
    --cpu) DEVICE=cpu; shift ;;
    --prepare-only) PREPARE_ONLY=1; shift ;;
    *) echo "gpu kit: unknown argument $1 (--out DIR, --stages a,b, --cpu, --prepare-only)"; exit 2 ;;
  esac
done
refuse() { echo "gpu kit: refusing to run: $*"; exit 2; }
T_START=$(date +%s.%N)

# Stage, its script and its limit in seconds (with the preflight's 20 s: 930 s, 15.5 minutes; the
# docs/gpu.md "Verifying on a GPU" says which to run in which call on a 15-minute lease; --stages
# picks stages, which run in this order).
# The first GPU run (H200) took 22, 0, 21, 14, 178 (cut short) and 3 s (packed, ftune_bench and
# families: not run yet). FTUNE_KIT_LIMITS overrides limits: "bench=300,tests=120".
STAGES=(
  "tests kit_tests.py 60"
  "debug_sync kit_tests.py 25"
  "parity kit_train.py 45"
  "packed kit_train.py 50"
  "memory kit_train.py 30"
  "bench kit_bench.py 260"
  "families kit_families.py 180"
  "causal_lm kit_causal_lm.py 150"
  "ftune_bench kit_ftune_bench.py 90"
  "profile kit_train.py 20"
  "steady kit_train.py 90"
  "trials kit_trials.py 120"
)
OPTIONAL_STAGES=" steady trials "  # run only when --stages names them
PREFLIGHT_LIMIT=20

[ -f "$KIT/kit.json" ] || refuse "$KIT/kit.json is missing (build the kit: bash tools/gpu_kit.sh)"
PY="${FTUNE_KIT_PYTHON:-}"
if [ -z "$PY" ]; then
  for p in /opt/torch/.venv/bin/python3 python3; do
    if command -v "$p" >/dev/null 2>&1; then PY="$p"; break; fi
  done
fi
[ -n "$PY" ] || refuse "no python3 found (set FTUNE_KIT_PYTHON)"
kit_field() {  # a field of kit.json (lists space-separated)
  "$PY" -c 'import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    v = v[k]
print(" ".join(v) if isinstance(v, list) else v)' "$KIT/kit.json" "$@"
}
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# 1. Unpack (once per kit build) into a scratch directory.
WORK="${FTUNE_KIT_WORK:-${TMPDIR:-/tmp}/ftune-gpu-kit-$(kit_field build id)}"
if [ ! -f "$WORK/.unpacked" ]; then
  rm -rf "$WORK" && mkdir -p "$WORK" || refuse "cannot create $WORK"
  for part in "$KIT"/*.tar.xz; do
    if command -v xz >/dev/null 2>&1; then
      tar -xJf "$part" -C "$WORK" || refuse "cannot unpack $part"
    else
      "$PY" -c 'import sys,tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$part" "$WORK" ||
        refuse "cannot unpack $part"
    fi
  done
  cp "$KIT/kit.json" "$WORK/kit.json" && touch "$WORK/.unpacked"
fi
SCRIPTS="$WORK/share/tools/gpu_kit"

# glibc: the one system library the kit relies on.
need_glibc=$(kit_field glibc)
have_glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
if [ -n "$have_glibc" ] &&
   [ "$(printf '%s\n%s\n' "$need_glibc" "$have_glibc" | sort -V | head -1)" != "$need_glibc" ]; then
  refuse "the kit needs glibc >= $need_glibc, this machine has $have_glibc"
fi

# The device-provided libraries: those the kit's programs link (kit.json device_libs) and, on the
# GPU, those loaded at run time: cuDNN's engine libraries (from libcudnn.so.9's directory) and the
# driver's libcuda and NVML (which the system's loader finds, as PyTorch's do).
needed=($(kit_field device_libs))
driver=()
if [ "$DEVICE" = cuda ]; then
  for l in "${needed[@]}"; do
    [ "$l" = libcudnn.so.9 ] && needed+=(libcudnn_graph.so.9 libcudnn_engines_precompiled.so.9
                                        libcudnn_engines_runtime_compiled.so.9 libcudnn_heuristic.so.9)
  done
  driver=(libcuda.so.1)
fi
site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
search=()
[ -n "$site" ] && [ -d "$site/nvidia" ] &&
  while IFS= read -r d; do search+=("$d"); done < <(find "$site/nvidia" -maxdepth 3 -type d -name lib | sort)
for d in "${CUDA_HOME:-}/lib64" /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         /usr/local/cuda/lib /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  [ -d "$d" ] && search+=("$d")
done
while IFS= read -r d; do search+=("$d"); done < <(ldconfig -p 2>/dev/null |
  awk -F'=> ' '/libcuda\.so\.1|libnvidia-ml\.so\.1/ {print $2}' | xargs -r -n1 dirname | sort -u)
search+=(/usr/lib/x86_64-linux-gnu /usr/lib64 /lib/x86_64-linux-gnu)
declare -A found=()
dirs=()
find_lib() {  # the first directory of the search list that holds $1; with "slot", a kit slot
  local d
  for d in "${search[@]}"; do
    if [ -e "$d/$1" ]; then
      found[$1]="$d/$1"
      [ "${2:-}" != slot ] || [[ " ${dirs[*]-} " == *" $d "* ]] || dirs+=("$d")
      return 0
    fi
  done
  return 1
}
missing=()
for l in "${needed[@]}"; do find_lib "$l" slot || missing+=("$l"); done
for l in "${driver[@]}"; do find_lib "$l" || missing+=("$l"); done
[ ${#missing[@]} -eq 0 ] ||
  refuse "${missing[*]} not found (looked in ${search[*]}); the kit needs: ${needed[*]} ${driver[*]}"
[ "$DEVICE" = cpu ] || find_lib libnvidia-ml.so.1 || true  # NVML: optional (ftune doctor says)
DEVICE_DIRS=$(IFS=:; echo "${dirs[*]}")

# The C++ runtime: the kit's copy (gcc 12's libstdc++ and libgcc_s, what the kit was tested
# with) where this glibc is new enough for it, else this machine's, if it defines every symbol
# version the kit uses (kit.json gcc_runtime).
runtime_glibc=$(kit_field gcc_runtime glibc)
if [ -z "$have_glibc" ] ||
   [ "$(printf '%s\n%s\n' "$runtime_glibc" "$have_glibc" | sort -V | head -1)" = "$runtime_glibc" ]; then
  runtime=kit
  runtime_note="the kit's libstdc++ (gcc 12)"
else
  sys_cxx=$(ldconfig -p 2>/dev/null | awk -F'=> ' '/libstdc\+\+\.so\.6 .*x86-64/ {print $2; exit}')
  sys_gcc=$(ldconfig -p 2>/dev/null | awk -F'=> ' '/libgcc_s\.so\.1 .*x86-64/ {print $2; exit}')
  lacking=$("$PY" - "$sys_cxx" "$sys_gcc" $(kit_field gcc_runtime versions) <<'PY'
import sys
blob = b"".join(open(p, "rb").read() for p in sys.argv[1:3] if p)
print(" ".join(v for v in sys.argv[3:] if v.encode() + b"\0" not in blob))
PY
)
  [ -n "$sys_cxx" ] && [ -z "$lacking" ] ||
    refuse "glibc $have_glibc is older than the kit's libstdc++ needs ($runtime_glibc), and this" \
           "machine's libstdc++ (${sys_cxx:-none}) lacks ${lacking:-everything}"
  runtime=system
  runtime_note="this machine's libstdc++ ($sys_cxx)"
fi
# The kit's programs find these through their RUNPATH slots (lib/cxx, lib/dev0..3): nothing goes
# on LD_LIBRARY_PATH, so the PyTorch of the benchmark keeps its own libraries.
link_out=$("$PY" "$SCRIPTS/kit_libs.py" link --kit "$WORK" --device-dirs "$DEVICE_DIRS" --cxx "$runtime") ||
  refuse "$link_out"
if [ -n "${FTUNE_KIT_HIDE:-}" ]; then  # the selfcheck: nothing but the kit, the dirs and glibc
  allow="$WORK"
  for d in "${dirs[@]}"; do allow="$allow:$d:$(readlink -f "$d")"; done
  # cuDNN's engine libraries take libz from the system, as any machine with PyTorch has it.
  export LD_AUDIT="$FTUNE_KIT_HIDE" FTUNE_HIDE_UNDER="$WORK" FTUNE_HIDE_ALLOW="$allow" \
         FTUNE_HIDE_SYSTEM_OK=libz.so.1
fi
unresolved=$(ldd "$WORK/bin/ftune" $(ls "$WORK"/lib/libftune.so 2>/dev/null) 2>&1 | grep "not found" |
             sort -u | tr -s ' \t\n' ' ')
[ -z "$unresolved" ] || refuse "bin/ftune cannot load: $unresolved"
if [ $PREPARE_ONLY = 1 ]; then
  echo "work: $WORK"
  echo "device-dirs: $DEVICE_DIRS"
  exit 0
fi

# The machine, for the report's header.
mkdir -p "$OUT" || refuse "cannot create $OUT"
OUT=$(cd "$OUT" && pwd)
RUN=$(mktemp -d "${TMPDIR:-/tmp}/gpu-kit-run-XXXXXX")
STAGE_DIR="$RUN/stages" LOGS="$RUN/logs"
mkdir -p "$STAGE_DIR" "$LOGS"
export FTUNE_KIT_MODELS="$RUN/models"
gpu=""
if [ "$DEVICE" = cuda ]; then
  timeout 20 nvidia-smi > "$LOGS/nvidia-smi.txt" 2>&1 || refuse "nvidia-smi failed: $(tail -1 "$LOGS/nvidia-smi.txt")"
  cat "$LOGS/nvidia-smi.txt"
  gpu=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
fi
for l in "${!found[@]}"; do echo "$l=${found[$l]}"; done | sort > "$LOGS/libraries.txt"
echo "gpu kit: CUDA libraries from ${DEVICE_DIRS//:/, }; C++ runtime: $runtime_note"
echo "libstdc++=${runtime_note}" >> "$LOGS/libraries.txt"
timeout 30 "$WORK/bin/ftune" doctor > "$LOGS/doctor.txt" 2>&1
doctor_rc=$?
cat "$LOGS/doctor.txt"
"$PY" - "$RUN/env.json" "$gpu" "$LOGS" "$doctor_rc" <<'PY'
import json, os, sys
path, gpu, logs, rc = sys.argv[1:5]
read = lambda n: open(os.path.join(logs, n)).read() if os.path.exists(os.path.join(logs, n)) else ""
libs = dict(l.split("=", 1) for l in read("libraries.txt").splitlines() if "=" in l)
json.dump({"gpu": gpu, "libraries": libs, "nvidia_smi": read("nvidia-smi.txt"),
           "doctor": read("doctor.txt"), "doctor_exit": int(rc)}, open(path, "w"), indent=1)
PY
"$PY" "$SCRIPTS/kit_report.py" begin --out "$OUT" --work "$WORK" --device "$DEVICE" --env "$RUN/env.json"
preflight_s=$(elapsed "$T_START")
"$PY" - "$STAGE_DIR/preflight.json" "$doctor_rc" "${gpu:-no GPU (--cpu)}" "$DEVICE_DIRS" <<'PY'
import json, sys
path, rc, gpu, dirs = sys.argv[1:5]
ok = rc == "0"
short = [d.split("site-packages/")[-1] if "site-packages/" in d else d for d in dirs.split(":")]
json.dump({"stage": "preflight", "status": "ok" if ok else "fail", "rows": [], "notes": [],
           "headline": "%s; CUDA libraries from %s%s" % (gpu, ", ".join(short),
                                                         "" if ok else "; ftune doctor exit " + rc)},
          open(path, "w"))
PY
"$PY" "$SCRIPTS/kit_report.py" add --out "$OUT" --stages "$STAGE_DIR" --stage preflight \
  --rc "$doctor_rc" --seconds "$preflight_s" --limit $PREFLIGHT_LIMIT

# 2. The stages.
for entry in "${STAGES[@]}"; do
  read -r name script limit <<< "$entry"
  for o in ${FTUNE_KIT_LIMITS:+${FTUNE_KIT_LIMITS//,/ }}; do [ "${o%%=*}" != "$name" ] || limit="${o#*=}"; done
  if [ -z "$ONLY" ]; then [[ "$OPTIONAL_STAGES" != *" $name "* ]] || continue
  else [[ ",$ONLY," == *",$name,"* ]] || continue; fi
  echo "gpu kit: stage $name (limit ${limit}s)"
  t0=$(date +%s.%N)
  timeout -k 10 "$limit" "$PY" "$SCRIPTS/$script" "$name" --work "$WORK" --stages "$STAGE_DIR" \
    --logs "$LOGS" --device "$DEVICE" --limit "$limit"
  rc=$?
  "$PY" "$SCRIPTS/kit_report.py" add --out "$OUT" --stages "$STAGE_DIR" --stage "$name" --rc "$rc" \
    --seconds "$(elapsed "$t0")" --limit "$limit"
  tar -czf "$OUT/gpu-logs.tar.gz" -C "$RUN" stages logs 2>/dev/null
done

# 3. The short table, last.
"$PY" "$SCRIPTS/kit_report.py" summary --out "$OUT"
status=$?
rm -rf "$RUN"
exit $status
