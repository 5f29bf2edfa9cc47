#!/usr/bin/env python3
"""The GPU kit's shared libraries: what to bundle, how the kit finds the machine's, and the
check that the kit needs nothing else.

The GPU machine has glibc, the NVIDIA driver and CUDA's own libraries (its CUDA toolkit and the
nvidia-* wheels of its PyTorch), and none of our Debian libraries. So every ELF file of the kit
(its programs and libraries) must find each library it needs either inside the kit or among the
device-provided ones (DEVICE_PROVIDED: CUDA runtime, cuBLAS/cuBLASLt, cuDNN, NVRTC, NVML, the
driver), or be glibc's own (GLIBC).

Every ELF file's RUNPATH names, through $ORIGIN, the kit's lib/ and its slots lib/cxx,
lib/dev0..dev3: links that run.sh makes on the machine (`link`) to the C++ runtime it chose and to
the directories where it found the CUDA libraries. Nothing is put on LD_LIBRARY_PATH, so the
Python processes of the benchmark keep their own libraries.

  kit_libs.py bundle --kit DIR     copies every other library the kit's ELF files need (as ldd
                                   resolves them here) into DIR/lib (the C++ runtime into
                                   DIR/lib/gcc-runtime), sets every ELF file's RUNPATH to the kit's
                                   lib/ and slots, strips them; prints JSON
  kit_libs.py link --kit DIR --device-dirs D1:D2 --cxx kit|system
                                   makes the slots: lib/devK -> the K-th device dir, lib/cxx ->
                                   lib/gcc-runtime (kit) or nothing (the machine's own)
  kit_libs.py check --kit DIR --device-dirs D1:D2 [--auditor SO] [--json]
                                   ldd on every ELF file (slots made) with the system's copies of
                                   everything but glibc hidden (the LD_AUDIT module
                                   hide_system_libs.c): each library must come from the kit, or be
                                   device-provided and come from a device dir, or be glibc's;
                                   every RUNPATH entry must start with $ORIGIN. Exit 1 with one
                                   line per problem otherwise
  kit_libs.py needs --kit DIR      the device-provided sonames the kit needs, the newest glibc
                                   symbol version it uses, and what its C++ runtime needs (JSON;
                                   run.sh checks them on the device)
  kit_libs.py build-auditor --out SO   compiles hide_system_libs.c (cc)

Python standard library; ldd, readelf, objdump, strip (binutils), patchelf and cc (link: none).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
AUDITOR_SOURCE = os.path.join(HERE, "hide_system_libs.c")

# Libraries the GPU machine provides: the driver's (libcuda, NVML) and CUDA's own, from its CUDA
# toolkit or the nvidia-* wheels of its PyTorch. Never bundled; on the device, run.sh finds them.
DEVICE_PROVIDED = re.compile(
    r"^lib(cuda|cudart|cublas|cublasLt|cudnn(_[a-z_]+)?|nvrtc(-builtins)?|nvidia-ml|cupti|"
    r"nvJitLink)\.so(\.[0-9.]+)?$")
# The C++ runtime, bundled apart in lib/gcc-runtime: run.sh links it as lib/cxx where the
# machine's glibc is new enough for it (Debian 12's libstdc++ needs glibc 2.36), and otherwise
# lets the machine's own serve, if that defines every symbol version the kit uses.
GCC_RUNTIME = {"libstdc++.so.6", "libgcc_s.so.1", "libgomp.so.1"}
GCC_RUNTIME_DIR = os.path.join("lib", "gcc-runtime")
# The RUNPATH slots under lib/ (links made on the machine): the C++ runtime, the device dirs.
CXX_SLOT = "cxx"
DEVICE_SLOTS = ["dev0", "dev1", "dev2", "dev3"]
# glibc's own libraries: present on every Linux machine (the version is checked by run.sh).
GLIBC = {"ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2",
         "librt.so.1", "libresolv.so.2", "libutil.so.1", "libanl.so.1", "libmvec.so.1",
         "linux-vdso.so.1"}


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def kit_elves(kit):
    """Every ELF file under kit/bin and kit/lib (sorted, real files only)."""
    out = []
    for top in ("bin", "lib"):
        for d, _, files in os.walk(os.path.join(kit, top)):
            for name in files:
                p = os.path.join(d, name)
                if not os.path.islink(p) and is_elf(p):
                    out.append(p)
    return sorted(out)


LDD_LINE = re.compile(r"^\s*(\S+)\s*=>\s*(not found|\S+)")
LDD_BARE = re.compile(r"^\s*(/\S+)\s+\(0x")


def ldd(path, env=None):
    """[(soname, resolved path or None)] as the dynamic loader resolves them."""
    r = subprocess.run(["ldd", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=env)
    deps = []
    for line in r.stdout.splitlines():
        m = LDD_LINE.match(line)
        if m:
            deps.append((m.group(1), None if m.group(2) == "not found" else m.group(2)))
            continue
        m = LDD_BARE.match(line)
        if m:  # the loader itself
            deps.append((os.path.basename(m.group(1)), m.group(1)))
    if r.returncode != 0 and not deps and "not a dynamic executable" not in r.stdout:
        raise RuntimeError("ldd %s: %s" % (path, r.stdout.strip()))
    return deps


def dynamic_entries(path, tag):
    """The values of a dynamic-section tag (NEEDED, RUNPATH, RPATH) of an ELF file."""
    r = subprocess.run(["readelf", "-d", path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       text=True)
    out = []
    for line in r.stdout.splitlines():
        if "(%s)" % tag in line:
            m = re.search(r"\[(.*)\]", line)
            if m:
                out.extend(x for x in m.group(1).split(":") if x)
    return out


def dynamic_symbols(path):
    """The dynamic symbol names of an ELF file. patchelf (0.14 to 0.18 at least, NixOS/patchelf
    issue #162) overwrites an old RUNPATH with 'X's, and the linker stores a symbol name that is a
    tail of the RUNPATH string ("read" of ".../openblas-pthread") inside it: the symbol becomes
    "XXXX" and the library fails to load. gpu_kit.sh links the kit without RUNPATHs; this check
    keeps the failure here, not on the GPU machine."""
    r = subprocess.run(["nm", "-D", "--format=posix", path], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    return sorted(line.split(" ")[0] for line in r.stdout.splitlines() if line)


def within(path, root):
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root + os.sep)


def bundle(kit):
    """Copies what the kit's ELF files need from this system into kit/lib, sets RUNPATHs."""
    lib = os.path.join(kit, "lib")
    os.makedirs(lib, exist_ok=True)
    copied = {}
    pending = kit_elves(kit)
    seen = set()
    while pending:  # ldd gives the transitive closure; a copied library is looked at once more
        elf = pending.pop()
        if elf in seen:
            continue
        seen.add(elf)
        for soname, resolved in ldd(elf):
            if soname in GLIBC or DEVICE_PROVIDED.match(soname):
                continue
            if resolved is None:
                raise RuntimeError("%s needs %s, which is not found on this machine" % (elf, soname))
            if within(resolved, kit) or soname in copied:
                continue
            dst = os.path.join(kit, GCC_RUNTIME_DIR if soname in GCC_RUNTIME else "lib", soname)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(os.path.realpath(resolved), dst)
            os.chmod(dst, 0o755)
            copied[soname] = os.path.realpath(resolved)
            pending.append(dst)
    for elf in kit_elves(kit):
        rel = os.path.relpath(lib, os.path.dirname(elf))
        base = "$ORIGIN" if rel == "." else "$ORIGIN/" + rel
        if os.path.basename(elf) in GCC_RUNTIME:
            runpath = "$ORIGIN"
        else:
            runpath = ":".join([base] + [base + "/" + slot for slot in [CXX_SLOT] + DEVICE_SLOTS])
        subprocess.run(["strip", "--strip-unneeded", elf], check=True)
        before = dynamic_symbols(elf)
        subprocess.run(["patchelf", "--set-rpath", runpath, elf], check=True)
        if dynamic_symbols(elf) != before:  # patchelf issue #162: see dynamic_symbols
            raise RuntimeError("patchelf --set-rpath renamed dynamic symbols of %s (an old RUNPATH "
                               "shared its tail with a symbol name): link it without a RUNPATH"
                               % elf)
    return {"bundled": {k: copied[k] for k in sorted(copied)}}


def link(kit, device_dirs, cxx):
    """Points the slots at the device dirs and at the C++ runtime ("kit": ours; "system": none)."""
    dirs = [d for d in device_dirs if d]
    if len(dirs) > len(DEVICE_SLOTS):
        raise RuntimeError("the CUDA libraries are spread over %d directories (%s); the kit has "
                           "%d slots" % (len(dirs), ", ".join(dirs), len(DEVICE_SLOTS)))
    lib = os.path.join(kit, "lib")
    for slot in [CXX_SLOT] + DEVICE_SLOTS:
        path = os.path.join(lib, slot)
        if os.path.islink(path):
            os.remove(path)
    for slot, d in zip(DEVICE_SLOTS, dirs):
        os.symlink(os.path.abspath(d), os.path.join(lib, slot))
    if cxx == "kit":
        os.symlink(GCC_RUNTIME_DIR[len("lib/"):], os.path.join(lib, CXX_SLOT))


def symbol_versions(elves):
    """The symbol versions the files import or define (objdump -T): GLIBC_2.34, GLIBCXX_3.4.30..."""
    out = set()
    for elf in elves:
        r = subprocess.run(["objdump", "-T", elf], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
        out.update(re.findall(r"\b((?:GLIBC|GLIBCXX|CXXABI|GCC)_[0-9.]+)\b", r.stdout))
    return out


def newest_glibc(versions):
    """The newest GLIBC_x.y of a set of versions, as "x.y"."""
    best = max([tuple(int(x) for x in v[len("GLIBC_"):].split(".")[:2])
                for v in versions if v.startswith("GLIBC_")] or [(0, 0)])
    return "%d.%d" % best


def loaded_at_run_time(linked):
    """The CUDA libraries the kit's programs dlopen on first use instead of linking them
    (src/cuda/lazy_library.h: cuBLASLt and NVRTC, of the CUDA major version the kit was built
    for, i.e. that of the libcudart it links). They do not appear as NEEDED, but the machine must
    provide them in a slot all the same."""
    out = set()
    for soname in linked:
        m = re.match(r"^libcudart\.so\.([0-9]+)$", soname)
        if m:
            out |= {"libcublasLt.so." + m.group(1), "libnvrtc.so." + m.group(1)}
    return out


def needs(kit):
    """What the machine running the kit must provide: the device libraries the kit links (and
    those it loads at run time: loaded_at_run_time), the newest glibc its own files use, and for
    its C++ runtime the glibc that our copy needs and the symbol versions (GLIBCXX, CXXABI, GCC) a
    machine's own copy would have to define."""
    elves = kit_elves(kit)
    runtime = [e for e in elves if os.path.basename(e) in GCC_RUNTIME]
    rest = [e for e in elves if e not in runtime]
    inside = {os.path.basename(e) for e in elves}
    device = set()
    for elf in elves:
        for soname in dynamic_entries(elf, "NEEDED"):
            if soname not in inside and DEVICE_PROVIDED.match(soname):
                device.add(soname)
    device |= loaded_at_run_time(device)
    used = symbol_versions(rest)
    return {"device_libs": sorted(device), "glibc": newest_glibc(used),
            "gcc_runtime": {"dir": GCC_RUNTIME_DIR, "glibc": newest_glibc(symbol_versions(runtime)),
                            "versions": sorted(v for v in used if not v.startswith("GLIBC_"))}}


def build_auditor(out):
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", out, AUDITOR_SOURCE], check=True)
    return out


def check(kit, device_dirs, auditor):
    """Problems (one line each) of the kit's ELF files resolved with the system's copies hidden
    (the slots made: link())."""
    kit = os.path.realpath(kit)
    dirs = [d for d in device_dirs if d]
    allow = [kit] + dirs + [os.path.realpath(d) for d in dirs]
    env = dict(os.environ)
    env.update({"LD_AUDIT": auditor, "FTUNE_HIDE_ALLOW": ":".join(allow), "FTUNE_HIDE_UNDER": kit})
    for name in ("LD_PRELOAD", "LD_LIBRARY_PATH"):
        env.pop(name, None)
    problems, resolved_from = [], {"kit": 0, "device": 0, "glibc": 0}
    # The hiding must work here, or the check proves nothing: bash needs libtinfo from the system.
    canary = [p for s, p in ldd("/bin/bash", env) if s.startswith("libtinfo")]
    if canary and canary[0] is not None:
        problems.append("the system's libraries are not hidden (ldd /bin/bash found %s with "
                        "LD_AUDIT=%s): this check would prove nothing" % (canary[0], auditor))
    elves = kit_elves(kit)
    if not elves:
        problems.append("%s holds no programs or libraries (bin/, lib/)" % kit)
    for elf in elves:
        name = os.path.relpath(elf, kit)
        for entry in dynamic_entries(elf, "RUNPATH") + dynamic_entries(elf, "RPATH"):
            if not entry.startswith("$ORIGIN"):
                problems.append("%s: RUNPATH entry %s is outside the kit (expected $ORIGIN/...)"
                                % (name, entry))
        for soname, path in ldd(elf, env):
            if soname in GLIBC:
                resolved_from["glibc"] += 1
            elif path is None:
                what = ("device-provided, but in none of the device dirs %s" % ":".join(dirs)
                        if DEVICE_PROVIDED.match(soname) else
                        "not in the kit (the system's copy is hidden)")
                problems.append("%s: %s not found: %s" % (name, soname, what))
            elif DEVICE_PROVIDED.match(soname) and any(within(path, d) for d in dirs):
                resolved_from["device"] += 1  # through a slot link, or a device dir
            elif within(path, kit):
                resolved_from["kit"] += 1
            else:
                problems.append("%s: %s resolved to %s, outside the kit and the device dirs"
                                % (name, soname, path))
    return problems, {"files": len(elves), "resolved": resolved_from}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bundle")
    b.add_argument("--kit", required=True)
    n = sub.add_parser("needs")
    n.add_argument("--kit", required=True)
    c = sub.add_parser("check")
    c.add_argument("--kit", required=True)
    c.add_argument("--device-dirs", default="", help="colon-separated directories")
    c.add_argument("--auditor", help="hide_system_libs.so (default: compiled into a temp dir)")
    c.add_argument("--json", action="store_true")
    k = sub.add_parser("link")
    k.add_argument("--kit", required=True)
    k.add_argument("--device-dirs", default="", help="colon-separated directories")
    k.add_argument("--cxx", choices=["kit", "system"], required=True)
    a_ = sub.add_parser("build-auditor")
    a_.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "bundle":
        print(json.dumps(bundle(a.kit), indent=1))
    elif a.cmd == "needs":
        print(json.dumps(needs(a.kit), indent=1))
    elif a.cmd == "build-auditor":
        print(build_auditor(a.out))
    elif a.cmd == "link":
        try:
            link(a.kit, a.device_dirs.split(":"), a.cxx)
        except RuntimeError as e:
            print("kit libs: %s" % e)
            return 1
    else:
        import tempfile
        tmp = None
        auditor = a.auditor
        if not auditor:
            tmp = tempfile.mkdtemp(prefix="kit-libs-")
            auditor = build_auditor(os.path.join(tmp, "hide_system_libs.so"))
        try:
            problems, stats = check(a.kit, a.device_dirs.split(":"), auditor)
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
        if a.json:
            print(json.dumps({"problems": problems, **stats}, indent=1))
        else:
            for p in problems:
                print("kit libs: " + p)
            r = stats["resolved"]
            print("kit libs: %d ELF files, %s: %d libraries from the kit, %d device-provided, %d "
                  "glibc (the system's other libraries hidden)" %
                  (stats["files"], "FAILED" if problems else "ok", r["kit"], r["device"],
                   r["glibc"]))
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
