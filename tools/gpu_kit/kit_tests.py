#!/usr/bin/env python3
"""The GPU kit's test stages: the GPU cases of every test binary, each against its CPU twin.

  tests       every test binary in the kit (found in bin/tests, not listed here), one after the
              other (tests that measure device memory must not share the GPU), each running its
              GPU cases: those the binary lists on this machine but did not list where the kit
              was built (the device-parametrised instances, `.../cuda0`, exist only where a GPU
              does), every test of test_cuda, and every test whose name says it concerns the GPU
              (cuda, gpu, cudnn, nvml, graph, device), but not the `.../cpu` instances (CI runs
              them). With FTUNE_REQUIRE_CUDNN=1 where the build knows it: a refused cuDNN
              attention shape fails instead of falling back.
  debug_sync  test_ops's GPU cases again with FTUNE_CUDA_DEBUG_SYNC=1 (synchronise and check after
              every op: an asynchronous fault is reported at the op that made it), where the
              build knows the variable; "not built yet" otherwise.

One row per binary: cases selected, new on this device, passed, failed, skipped, not run (the
stage's time ran out, or the binary crashed), seconds, and the first line of each failure.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kit_stage import Kit, Stage, run, stage_args  # noqa: E402

GPU_NAME = re.compile(r"cuda|gpu|cudnn|nvml|graph|device", re.IGNORECASE)
# A parametrised case's result line ends its name with ", where GetParam() = ...".
RESULT = re.compile(r"^\[\s+(OK|FAILED|SKIPPED)\s+\] ([^\s,]+)")
RUN = re.compile(r"^\[ RUN      \] (\S+)")
PER_BINARY_S = 60  # a hung binary leaves time for the others


def list_tests(binary, env, log):
    rc, out = run([binary, "--gtest_list_tests"], log, 60, env)
    if rc != 0:
        raise RuntimeError("%s --gtest_list_tests: exit %d" % (os.path.basename(binary), rc))
    names, suite = [], ""
    for line in out.splitlines():
        if not line.strip() or line.startswith("$ ") or line.startswith("[exit"):
            continue
        if not line.startswith(" "):
            suite = line.split("#")[0].strip()
        else:
            names.append(suite + line.split("#")[0].strip())
    return names


def parse_results(out):
    """{test: (result, first failure or skip line)} from gtest's output; a test that started and
    never finished is "not run" (killed or crashed)."""
    results, current, lines = {}, None, []
    for line in out.splitlines():
        m = RUN.match(line)
        if m:
            current, lines = m.group(1), []
            continue
        m = RESULT.match(line)
        if m and m.group(2) == current:
            detail = " ".join([l.strip() for l in lines if l.strip() and not l.startswith("[")][:3])
            if m.group(1) == "SKIPPED":  # gtest prints "file:line: Skipped" then the reason
                skip = [l.strip() for l in lines if l.strip()]
                detail = skip[1] if len(skip) > 1 and skip[0].endswith("Skipped") else detail
            results[current] = (m.group(1), detail[:200])
            current = None
            continue
        if current:
            lines.append(line)
    if current:
        results[current] = ("NOT RUN", "started, never finished (killed at the limit or crashed)")
    return results


def run_binary(stage, binary, env, known, log):
    name = os.path.basename(binary)
    listed = list_tests(binary, env, log)
    new = [t for t in listed if t not in known.get(name, listed)]
    chosen = [t for t in listed if not t.endswith("/cpu")  # the CPU instance: CI runs it
              and (name == "test_cuda" or t in new or GPU_NAME.search(t))]
    if not chosen:
        stage.row({"binary": name, "selected": 0, "new_on_device": len(new)})
        return True
    t0 = stage.left()
    # A '-' would start gtest's negative patterns: '?' matches it.
    pattern = ":".join(t.replace("-", "?") for t in chosen)
    rc, out = run([binary, "--gtest_color=no", "--gtest_filter=" + pattern], log,
                  min(stage.left(), PER_BINARY_S), env)
    results = parse_results(out)
    count = {k: 0 for k in ("OK", "FAILED", "SKIPPED", "NOT RUN")}
    for t in chosen:
        count[results.get(t, ("NOT RUN", ""))[0]] += 1
    failures = ["%s: %s" % (t, d) for t, (r, d) in sorted(results.items()) if r == "FAILED"]
    skips = {}
    for t, (r, d) in results.items():
        if r == "SKIPPED":
            skips[d] = skips.get(d, 0) + 1
    row = {"binary": name, "selected": len(chosen), "new_on_device": len(new),
           "passed": count["OK"], "failed": count["FAILED"], "skipped": count["SKIPPED"],
           "not_run": count["NOT RUN"], "seconds": round(t0 - stage.left(), 1),
           "exit": rc}
    if failures:
        row["failures"] = failures[:20]
    if skips:
        row["skip_reasons"] = {k: v for k, v in sorted(skips.items(), key=lambda kv: -kv[1])[:5]}
    stage.row(row)
    return rc == 0 and count["FAILED"] == 0 and count["NOT RUN"] == 0


def main():
    a = stage_args(__doc__.split("\n\n")[0]).parse_args()
    kit = Kit(a.work)
    stage = Stage(a.stage, a.stages, a.limit)
    log = os.path.join(a.logs, a.stage + ".log")
    env = kit.test_env()
    known = {}
    lists = os.path.join(kit.share, "test_lists.json")
    if os.path.exists(lists):
        with open(lists) as f:
            known = json.load(f)
    on_gpu = a.device != "cpu"
    if on_gpu and kit.feature("FTUNE_REQUIRE_CUDNN"):
        env["FTUNE_REQUIRE_CUDNN"] = "1"
    binaries = sorted(os.path.join(kit.bin, "tests", b) for b in os.listdir(os.path.join(kit.bin, "tests"))
                      if b.startswith("test_"))
    if a.stage == "debug_sync":
        if not kit.feature("FTUNE_CUDA_DEBUG_SYNC"):
            return stage.finish("skipped", "FTUNE_CUDA_DEBUG_SYNC: not built yet")
        env["FTUNE_CUDA_DEBUG_SYNC"] = "1"
        binaries = [b for b in binaries if os.path.basename(b) == "test_ops"]
    stage.note("FTUNE_REQUIRE_CUDNN=1" if "FTUNE_REQUIRE_CUDNN" in env else
               "FTUNE_REQUIRE_CUDNN: %s" % ("not built yet" if not kit.feature("FTUNE_REQUIRE_CUDNN")
                                            else "off (no GPU)"))
    ok = True
    for b in binaries:
        if stage.left() < 3:
            stage.row({"binary": os.path.basename(b), "not_run": "all: the stage's time ran out"})
            ok = False
            continue
        try:
            ok = run_binary(stage, b, env, known, log) and ok
        except RuntimeError as e:
            stage.row({"binary": os.path.basename(b), "error": str(e)})
            ok = False
    rows = [r for r in stage.doc["rows"] if "selected" in r]
    total = {k: sum(r.get(k, 0) for r in rows if isinstance(r.get(k, 0), int))
             for k in ("selected", "passed", "failed", "skipped", "not_run", "new_on_device")}
    headline = ("%d binaries, %d GPU-related cases (%d new on this device): %d passed, %d failed, "
                "%d skipped, %d not run" % (len(binaries), total["selected"], total["new_on_device"],
                                            total["passed"], total["failed"], total["skipped"],
                                            total["not_run"]))
    return stage.finish("ok" if ok else "fail", headline)


if __name__ == "__main__":
    sys.exit(main())
