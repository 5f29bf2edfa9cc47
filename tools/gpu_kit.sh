#!/usr/bin/env bash
# The GPU kit: everything ftune needs to verify itself on the project's GPU machine (an H100 or
# H200 lent rarely, for 15 minutes, with no network, CUDA 13.0, driver 580, PyTorch 2.11 in its
# own Python, none of our Debian libraries), built here and carried there in the working tree.
#
#   bash tools/gpu_kit.sh              builds .cache/gpu-kit/ (ignored by git, at most 40 MiB)
#   bash tools/gpu_kit.sh --selfcheck  checks it here, without a GPU
#   bash tools/gpu_kit.sh --no-build   packs what the last build made (FTUNE_KIT_BUILD_DIR)
#   there:  bash .cache/gpu-kit/run.sh (the device tool's `carry: [".cache/gpu-kit"]`)
#
# The build: Release, CUDA for sm_90 (FTUNE_KIT_CUDA_ARCHS, default 90-real: H100/H200 machine
# code only), baseline x86-64 host code (not -march=native: the GPU machine's CPU is another one;
# OpenBLAS picks its kernels at run time), ftune's library shared (libftune.so: the test and
# benchmark programs do not each carry every kernel), in build-gpu-kit/ (ignored by git; ccache
# shares its objects between clones, and its test objects with build/). The kit holds, as
# .tar.xz parts that run.sh unpacks: bin/ (ftune, every test binary and every benchmark binary
# the build made), lib/ (libftune.so and every shared library they need that the GPU machine does
# not provide: our Debian libraries with their dependencies, libstdc++ and libgcc_s; RUNPATH
# $ORIGIN/.../lib; tools/gpu_kit/kit_libs.py), share/ (test fixtures, examples, the stage
# scripts, the benchmark and its PyTorch peer), data/ (the WordNet gloss pairs); and, unpacked,
# run.sh and kit.json (what was built, the CUDA libraries and glibc it needs, the names it
# knows).
#
# libstdc++ and libgcc_s are bundled, and always used: the GPU machine's image is not Debian 12
# and its libstdc++ may be older than gcc 12's (GLIBCXX_3.4.30), while NVIDIA's libraries loaded
# into the same process need no more than GLIBCXX_3.4.21, so one copy, ours, serves the whole
# process. Linking them statically is no option: the Debian libraries we bundle (yaml-cpp, ICU,
# spdlog...) link libstdc++.so.6 themselves. glibc is the machine's; run.sh checks its version.
#
# --selfcheck: the kit's size (per part); every ELF file of the kit resolves every library from
# the kit, from the CUDA libraries run.sh finds (here: this machine's CUDA), or from glibc, with
# the system's copies of everything else hidden (an LD_AUDIT module, tools/gpu_kit/
# hide_system_libs.c); then the stages run on the CPU from the kit folder, hidden the same way
# (run.sh --cpu). FTUNE_KIT_PYTHON names the Python of the stages (the benchmark stage wants torch
# and transformers and reports itself skipped without them).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD="${FTUNE_KIT_BUILD_DIR:-build-gpu-kit}"
KIT=.cache/gpu-kit
MAX_BYTES=$((40 * 1024 * 1024))
ARCHS="${FTUNE_KIT_CUDA_ARCHS:-90-real}"
JOBS="${FTUNE_JOBS:-$(nproc)}"
export PATH="$PATH:/usr/local/cuda/bin"
say() { echo "gpu_kit: $*"; }
die() { echo "gpu_kit: $*" >&2; exit 1; }

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

build() {
  # ccache matches objects across clones by paths relative to its base directory.
  case "$ROOT/" in "${CCACHE_BASEDIR:-/nonexistent}"/*) ;; *) export CCACHE_BASEDIR="$ROOT" ;; esac
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFTUNE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" -DFTUNE_NATIVE=OFF -DCMAKE_CXX_FLAGS= \
    -DFTUNE_SHARED_LIB=ON -DFTUNE_BUILD_TESTS=ON -DFTUNE_BUILD_BENCH=ON -DCMAKE_SKIP_BUILD_RPATH=ON \
    -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST \
    > "$BUILD.configure.log" 2>&1 ||
    { cat "$BUILD.configure.log"; die "cmake configure failed"; }
  grep -q "cuDNN flash attention: cudnn_frontend" "$BUILD.configure.log" ||
    die "this build has no cuDNN attention ($(grep 'cuDNN flash attention' "$BUILD.configure.log")):" \
        "the kit runs with FTUNE_REQUIRE_CUDNN=1; run tools/install_deps.sh"
  nice -n 5 cmake --build "$BUILD" -j "$JOBS"
}

assemble() {
  local tree="$1"
  # The kit build is linked without RUNPATHs (kit_libs.py dynamic_symbols says why): here its
  # programs find libftune.so, CUDA's libraries and OpenBLAS's threaded build through this.
  export LD_LIBRARY_PATH="$(cd "$BUILD" && pwd):/usr/local/cuda/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  mkdir -p "$tree"/bin/tests "$tree"/bin/bench "$tree"/lib "$tree"/share "$tree"/data
  cp "$BUILD/ftune" "$tree/bin/"
  cp "$BUILD/tests/libfake-nvidia-ml.so" "$tree/lib/"
  [ ! -f "$BUILD/libftune.so" ] || cp "$BUILD/libftune.so" "$tree/lib/"
  local f
  for f in "$BUILD"/tests/test_* "$BUILD"/bench/*; do  # whatever the build made
    [ -f "$f" ] && [ -x "$f" ] || continue
    case "$f" in */tests/*) cp "$f" "$tree/bin/tests/" ;; *) cp "$f" "$tree/bin/bench/" ;; esac
  done
  # The tests the binaries list here, without a GPU: on the device, what they list beyond this
  # is the GPU-parametrised cases.
  python3 - "$tree/share/test_lists.json" "$BUILD"/tests/test_* <<'PY'
import json, os, subprocess, sys
lists = {}
for b in sys.argv[2:]:
    if not (os.path.isfile(b) and os.access(b, os.X_OK)):
        continue
    out = subprocess.run([b, "--gtest_list_tests"], stdout=subprocess.PIPE, text=True, check=True).stdout
    names, suite = [], ""
    for line in out.splitlines():
        if line.strip() and not line.startswith(" "):
            suite = line.split("#")[0].strip()
        elif line.strip():
            names.append(suite + line.split("#")[0].strip())
    lists[os.path.basename(b)] = names
json.dump(lists, open(sys.argv[1], "w"), indent=0)
PY
  python3 tools/gpu_kit/kit_libs.py bundle --kit "$tree" > "$BUILD.bundle.json"
  # The parts of the source tree that the tests and the stages read.
  mkdir -p "$tree/share/tests" "$tree/share/src/train" "$tree/share/bench" "$tree/share/tools/gpu_kit"
  cp -r tests/fixtures "$tree/share/tests/"
  cp -r examples "$tree/share/"
  cp src/train/gpu_peak_flops.json "$tree/share/src/train/"
  cp bench/gpu_vs_hf.py bench/hf_peer_train.py bench/hf_peer_causal_lm.py "$tree/share/bench/"
  cp tools/gpu_kit/*.py "$tree/share/tools/gpu_kit/"
  cp tools/check_hf_load.py "$tree/share/tools/"
  local data="$ROOT/.cache/data/wordnet-3k"  # as tools/run_main.sh makes it
  [ -f "$data/validation.jsonl" ] ||
    python3 examples/wordnet_pairs.py --out "$data" --seed 13 --max-train-groups 3000 --quiet
  mkdir -p "$tree/data/wordnet-3k"
  cp "$data/train.jsonl" "$data/validation.jsonl" "$tree/data/wordnet-3k/"
}

write_manifest() {  # kit.json: what was built, how, what it needs, the names it knows
  local tree="$1" dest="$2"
  BUNDLE_JSON="$BUILD.bundle.json" python3 - "$tree" "$dest" "$ARCHS" <<'PY'
import datetime, hashlib, json, os, re, subprocess, sys
tree, dest, archs = sys.argv[1:4]
git = lambda *a: subprocess.run(["git", *a], stdout=subprocess.PIPE, text=True).stdout.strip()
needs = json.loads(subprocess.run([sys.executable, "tools/gpu_kit/kit_libs.py", "needs", "--kit", tree],
                                  stdout=subprocess.PIPE, text=True, check=True).stdout)
lib = b"".join(open(p, "rb").read() for p in (os.path.join(tree, "lib", "libftune.so"),
                                             os.path.join(tree, "bin", "ftune")) if os.path.exists(p))
# Names other parts of ftune add as they land (the kit uses each where the build knows it).
names = ["FTUNE_REQUIRE_CUDNN", "FTUNE_CUDA_DEBUG_SYNC", "FTUNE_PROFILE_OPS", "gpu_paths",
         "attention_packed_cudnn", "speedup_of_default", "trials_per_device"]
features = {n: n.encode() in lib for n in names}
gpu_benches = []
for src in sorted(os.listdir("bench")):
    name, ext = os.path.splitext(src)
    if ext == ".cc" and os.path.exists(os.path.join(tree, "bin", "bench", name)):
        head = open(os.path.join("bench", src)).read(3000)
        if name.startswith("cuda_") or "CUDA only" in head:
            gpu_benches.append(name)
now = datetime.datetime.now(datetime.timezone.utc)
commit = git("rev-parse", "--short", "HEAD")
build = {"id": hashlib.sha256((commit + now.isoformat()).encode()).hexdigest()[:12],
         "commit": commit, "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
         "date": now.strftime("%Y-%m-%d %H:%M UTC"), "cuda_archs": archs,
         "compiler": subprocess.run(["c++", "--version"], stdout=subprocess.PIPE,
                                    text=True).stdout.splitlines()[0],
         "host_arch": "x86-64 (baseline)", "shared_library": True}
parts = {}
for name in sorted(os.listdir(os.path.dirname(dest))):
    if name.endswith(".tar.xz"):
        part = name[:-len(".tar.xz")]
        raw = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(tree, part))
                  for f in fs)
        parts[part] = {"bytes": raw, "compressed_bytes": os.path.getsize(os.path.join(os.path.dirname(dest), name))}
manifest = {"build": build, "device_libs": needs["device_libs"], "glibc": needs["glibc"],
            "gcc_runtime": needs["gcc_runtime"],
            "features": features, "gpu_benches": gpu_benches, "parts": parts,
            "bundled_libs": json.load(open(os.environ["BUNDLE_JSON"]))["bundled"]}
json.dump(manifest, open(dest, "w"), indent=1)
PY
}

pack() {
  local tree new="$KIT.new"
  mkdir -p "$ROOT/.cache"  # a fresh clone has none
  tree=$(mktemp -d "$ROOT/.cache/gpu-kit.tree.XXXXXX")
  trap 'rm -rf "$tree" "$new"' EXIT
  assemble "$tree"
  rm -rf "$new" && mkdir -p "$new"
  local part
  for part in bin lib share data; do
    say "compressing $part ($(du -sh "$tree/$part" | cut -f1))"
    tar -C "$tree" -cf - "$part" | xz "${FTUNE_KIT_XZ:--9}" -T"$JOBS" > "$new/$part.tar.xz"
  done
  cp tools/gpu_kit/run.sh "$new/run.sh"
  write_manifest "$tree" "$new/kit.json"
  local total
  total=$(du -cb "$new"/* | tail -1 | cut -f1)
  [ "$total" -le $MAX_BYTES ] || { sizes; die "the kit is $(mib "$total"), over 40 MiB"; }
  rm -rf "$KIT" && mv "$new" "$KIT"
  rm -rf "$tree"
  trap - EXIT
  sizes
  say "built $KIT ($(mib "$total")); check it: bash tools/gpu_kit.sh --selfcheck"
}

sizes() {  # the kit's size per part
  local dir="$KIT"
  [ -d "$KIT.new" ] && dir="$KIT.new"
  python3 - "$dir" <<'PY'
import json, os, sys
d = sys.argv[1]
k = json.load(open(os.path.join(d, "kit.json"))) if os.path.exists(os.path.join(d, "kit.json")) else {}
total = 0
for name in sorted(os.listdir(d)):
    size = os.path.getsize(os.path.join(d, name))
    total += size
    raw = k.get("parts", {}).get(name.replace(".tar.xz", ""), {}).get("bytes")
    print("gpu_kit:   %-16s %7.1f MiB%s" % (name, size / 2**20,
          " (%.1f MiB unpacked)" % (raw / 2**20) if raw else ""))
print("gpu_kit:   %-16s %7.1f MiB of 40" % ("total", total / 2**20))
PY
}

selfcheck() {
  [ -f "$KIT/kit.json" ] && [ -f "$KIT/run.sh" ] || die "no kit in $KIT: build it (bash tools/gpu_kit.sh)"
  local total  # tmp stays global: the EXIT trap removes it after this function returns
  total=$(du -cb "$KIT"/* | tail -1 | cut -f1)
  sizes
  [ "$total" -le $MAX_BYTES ] || die "selfcheck: the kit is $(mib "$total"), over 40 MiB"
  tmp=$(mktemp -d)
  trap 'rm -rf "${tmp:-}"' EXIT
  local auditor="$tmp/hide_system_libs.so"
  python3 tools/gpu_kit/kit_libs.py build-auditor --out "$auditor" > /dev/null
  export FTUNE_KIT_WORK="$tmp/work" FTUNE_KIT_HIDE="$auditor"
  local prep work dirs
  prep=$(bash "$KIT/run.sh" --cpu --prepare-only) || { echo "$prep"; die "selfcheck: run.sh could not prepare"; }
  work=$(echo "$prep" | sed -n 's/^work: //p')
  dirs=$(echo "$prep" | sed -n 's/^device-dirs: //p')
  say "selfcheck: libraries (device-provided CUDA from ${dirs//:/, })"
  python3 tools/gpu_kit/kit_libs.py check --kit "$work" --device-dirs "$dirs" --auditor "$auditor" ||
    die "selfcheck: the kit needs libraries it does not hold"
  say "selfcheck: the stages on the CPU, from the kit, with the system's libraries hidden"
  bash "$KIT/run.sh" --cpu --out "$tmp/out" || die "selfcheck: a CPU stage failed (see above)"
  say "selfcheck: ok"
}

case "${1:-}" in
  "") build && pack ;;
  --no-build) pack ;;  # pack what $BUILD (FTUNE_KIT_BUILD_DIR) holds
  --selfcheck) selfcheck ;;
  *) die "unknown argument $1 (no argument: build the kit; --no-build: pack the last build; --selfcheck: check it)" ;;
esac
