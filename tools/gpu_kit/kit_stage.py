"""What every stage of the GPU kit shares (tools/gpu_kit/run.sh runs the stages): the unpacked
kit's layout, the stage's result file, and running a program with what is left of the stage's
time.

A stage writes STAGES/<name>.json as it goes: rows are appended one at a time and the file is
replaced atomically after each, so a stage killed at its limit leaves every row it finished;
kit_report.py turns the file into the report's section.

Kit layout (gpu_kit.sh writes it; run.sh unpacks it into WORK):
  WORK/bin/ftune, bin/tests/test_*, bin/bench/*      programs (RUNPATH $ORIGIN/../lib)
  WORK/lib/                                          libftune.so and the bundled libraries
  WORK/share/                                        the parts of the source tree the tests and
                                                     stages read: tests/fixtures, examples,
                                                     src/train/gpu_peak_flops.json, bench/*.py,
                                                     tools/gpu_kit/*.py
  WORK/data/wordnet-3k/                              the WordNet gloss pairs (benchmark data)
  WORK/kit.json                                      what was built, how, and what it needs
"""
import argparse
import json
import os
import subprocess
import sys
import time


class Kit:
    def __init__(self, work):
        self.work = os.path.abspath(work)
        self.bin = os.path.join(self.work, "bin")
        self.ftune = os.path.join(self.bin, "ftune")
        self.share = os.path.join(self.work, "share")
        self.fixtures = os.path.join(self.share, "tests", "fixtures")
        self.data = os.path.join(self.work, "data", "wordnet-3k")
        with open(os.path.join(self.work, "kit.json")) as f:
            self.info = json.load(f)

    def feature(self, name):
        """Whether the built ftune knows this name (an environment variable, a summary key)."""
        return bool(self.info.get("features", {}).get(name))

    def test_env(self):
        """The environment of the test binaries: where their fixtures, sources and ftune are."""
        env = dict(os.environ)
        env.update({"FTUNE_TEST_FIXTURES_DIR": self.fixtures, "FTUNE_TEST_SOURCE_DIR": self.share,
                    "FTUNE_TEST_BINARY": self.ftune,
                    "FTUNE_TEST_FAKE_NVML": os.path.join(self.work, "lib", "libfake-nvidia-ml.so")})
        return env


class Stage:
    """The result file of one stage: rows, notes, a status and a one-line headline."""

    def __init__(self, name, stages_dir, limit=None):
        self.path = os.path.join(stages_dir, name + ".json")
        self.doc = {"stage": name, "status": "running", "headline": "", "rows": [], "notes": [],
                    "limit_s": limit}
        self.t0 = time.time()
        self.deadline = self.t0 + (limit - 5 if limit else 10 ** 9)
        self._write()

    def left(self):
        """Seconds until the stage should stop starting new work."""
        return self.deadline - time.time()

    def _write(self):
        self.doc["seconds"] = round(time.time() - self.t0, 1)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=1)
        os.replace(tmp, self.path)

    def row(self, row, order=None):
        """Appends a row; with `order` (a sort key), keeps the rows sorted by it."""
        self.doc["rows"].append(row)
        if order:
            self.doc["rows"].sort(key=order)
        self._write()

    def note(self, text):
        self.doc["notes"].append(text)
        self._write()

    def finish(self, status, headline):
        self.doc["status"], self.doc["headline"] = status, headline
        self._write()
        return 0 if status in ("ok", "skipped") else 1


def run(cmd, log, timeout, env=None, cwd=None):
    """Runs cmd with its output appended to `log`; (exit code, output). 124 when it ran past
    `timeout` seconds (then killed, with its process group)."""
    t0 = time.time()
    with open(log, "a") as f:
        f.write("$ %s\n" % " ".join(cmd))
        f.flush()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=env, cwd=cwd, start_new_session=True, errors="replace")
        try:
            out, _ = p.communicate(timeout=max(timeout, 1))
            rc = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            out, _ = p.communicate()
            rc = 124
        f.write(out)
        f.write("[exit %d after %.1f s]\n" % (rc, time.time() - t0))
    return rc, out


def open_stage(doc):
    """What a stage script starts with: its arguments (doc's first paragraph describes it), the
    kit, its result file, its log and whether it runs on the GPU."""
    a = stage_args(doc.split("\n\n")[0]).parse_args()
    return (a, Kit(a.work), Stage(a.stage, a.stages, a.limit),
            os.path.join(a.logs, a.stage + ".log"), a.device != "cpu")


def missing_modules(modules):
    """None when this Python imports every module (the PyTorch + HF peer's), else the last line
    of the failed import."""
    probe = subprocess.run([sys.executable, "-c", "import " + ", ".join(modules)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return None if probe.returncode == 0 else (probe.stdout.strip().splitlines() or ["?"])[-1][:120]


def hf_peer(kit, stage, on_gpu):
    """bench/gpu_vs_hf (the PyTorch + HF + PEFT peer's runs and rows) when this Python imports
    torch, transformers, peft and numpy: (module, None); else (None, the stage finished as skipped
    on the CPU, failed on the GPU)."""
    missing = missing_modules(["torch", "transformers", "peft", "numpy"])
    if missing:
        return None, stage.finish("skipped" if not on_gpu else "fail",
                                  "%s cannot import torch, transformers, peft and numpy: no HF "
                                  "peer (%s)" % (sys.executable, missing))
    sys.path.insert(0, os.path.join(kit.share, "bench"))
    import gpu_vs_hf
    return gpu_vs_hf, None


def stage_args(description):
    """The arguments every stage script takes (run.sh passes them)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("stage")
    ap.add_argument("--work", required=True, help="the unpacked kit")
    ap.add_argument("--stages", required=True, help="directory of the stage result files")
    ap.add_argument("--logs", required=True, help="directory of the stage logs")
    ap.add_argument("--device", default="cuda", help="cuda (the GPU run) or cpu (the selfcheck)")
    ap.add_argument("--limit", type=float, default=None, help="the stage's time limit, seconds")
    return ap
