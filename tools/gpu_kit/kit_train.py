#!/usr/bin/env python3
"""The GPU kit's training stages: `ftune train` runs on the device, read from their metrics.jsonl,
summary.json and op_profile.json.

  parity   CPU/GPU end to end: the same run (model, data, seed, dropout 0.1, 50 steps, loss logged
           every step, ftune's attention kernel, whose dropout masks are the CPU's) on the CPU in
           fp32 and on the GPU in fp32 and bf16, per-step losses compared (max relative
           difference <= 1e-4 fp32, <= 2e-2 bf16: DESIGN.md); each GPU run twice, CUDA graphs on
           (the default) and off, whose losses must agree within 1e-6 with graphs replayed; the
           tiny fp32 run once more as one data-parallel rank (NCCL's sum over one GPU; issue 20),
           whose losses must agree within 1e-6 too.
           Models: a tiny random BERT (hidden 64, 2 layers) and a MiniLM-sized one (hidden 384,
           6 layers), on a synthetic pair task.
  packed   packed (padding-free, data.packing on) batches on the device: the same run as parity's
           (tiny BERT, dropout 0.1, ftune's attention) packed on the CPU in fp32 and packed on the
           GPU in fp32 (per-step losses within 1e-4) and bf16 (2e-2); packed vs padded on the GPU
           in fp32 (1e-4: dropout masks are keyed by row and position, not by layout); and packed
           bf16 with cuDNN attention (its ragged layout; attention dropout 0, as cuDNN's masks are
           its own) vs the CPU's packed fp32 run without attention dropout (2e-2). Each run's
           summary.json must say it packed, and gpu_paths must show which kernel ran the packed
           attention: packed_ftune for ftune's runs, packed_cudnn (none refused) for cuDNN's.
  memory   planned vs measured device memory: BERT-base and MiniLM-sized, gradient checkpointing
           off and on, effective batch 32 at 128 tokens on the WordNet pairs, 3 steps: the plan's
           total (arena + cuBLASLt workspace) next to the device memory the run took
           (cudaMemGetInfo before the arena minus the lowest free memory seen).
  steady   (only when named) samples/s per window of 400-step runs, BERT-base with graphs on and
           the default padding (auto: length buckets on a GPU), graphs on padded to multiples of 8
           (the old default) and of 32, graphs off, MiniLM with graphs on; the input wait, the
           graph counters and the "gpu_paths" captures and cuDNN plan builds with their seconds:
           where a long run's time goes and what each new sequence length costs.
  profile  the per-op time of one BERT-base training step (FTUNE_PROFILE_OPS=1, step 8 of 8):
           the largest rows of op_profile.json, the GEMM and attention shares and the gap; with
           the "gpu_paths" counters of summary.json where the build writes them.

With --device cpu (the selfcheck) the same stages run on the CPU at smoke sizes: they prove the
kit's programs, libraries, data and scripts work from the kit folder, not the GPU.
"""
import json
import math
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kit_models import random_bert, write_pair_task  # noqa: E402
from kit_stage import Kit, Stage, run, stage_args  # noqa: E402


PROFILE_STEPS = 8


class Runs:
    """`ftune train` runs of one stage, in a scratch directory, logged to the stage's log."""

    def __init__(self, kit, stage, log, device):
        self.kit, self.stage, self.log, self.device = kit, stage, log, device
        self.scratch = tempfile.mkdtemp(prefix="gpu-kit-")
        self.env = dict(os.environ)
        if device != "cpu" and kit.feature("FTUNE_REQUIRE_CUDNN"):
            self.env["FTUNE_REQUIRE_CUDNN"] = "1"

    def model(self, size):
        root = os.environ.get("FTUNE_KIT_MODELS") or os.path.join(self.scratch, "models")
        return random_bert(size, self.kit.fixtures, root)

    def train(self, name, config, overrides=(), env=None):
        """Runs `ftune train`; returns (summary, train losses by step, run dir) or raises."""
        out = os.path.join(self.scratch, name)
        cfg = os.path.join(self.scratch, name + ".yaml")
        with open(cfg, "w") as f:
            f.write(config)
        cmd = [self.kit.ftune, "train", "--config", cfg, "output.dir=" + out,
               "output.overwrite=true", "output.progress=plain", "output.tensorboard=false"]
        rc, text = run(cmd + list(overrides), self.log, self.stage.left(),
                       dict(self.env, **(env or {})))
        if rc != 0:
            tail = [l for l in text.strip().splitlines() if l.strip()][-1:] or [""]
            raise RuntimeError("ftune train %s: %s: %s" % (
                name, "killed at the stage's limit" if rc == 124 else "exit %d" % rc, tail[0][:300]))
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        losses = {}
        with open(os.path.join(out, "metrics.jsonl")) as f:
            for line in f:
                row = json.loads(line)
                if row.get("split") == "train":
                    losses[row["step"]] = row["loss"]
        shutil.rmtree(os.path.join(out, "model"), ignore_errors=True)
        shutil.rmtree(os.path.join(out, "checkpoints"), ignore_errors=True)
        return summary, losses, out

    def close(self):
        shutil.rmtree(self.scratch, ignore_errors=True)


def max_rel_diff(a, b):
    """(largest |a - b| / |b| over the steps both logged, its step); inf if the steps differ."""
    if set(a) != set(b) or not a:
        return math.inf, None
    worst, at = 0.0, None
    for s in sorted(b):
        d = abs(a[s] - b[s]) / max(abs(b[s]), 1e-12)
        if not math.isfinite(d):
            return math.inf, s
        if d > worst:
            worst, at = d, s
    return worst, at


def parity(runs, stage, on_gpu):
    steps, batch = (50, 16) if on_gpu else (12, 8)
    data = os.path.join(runs.scratch, "pairs.jsonl")
    write_pair_task(data, steps * batch, seed=1)
    ok = True
    for size in (["tiny", "minilm"] if on_gpu else ["tiny"]):
        try:
            model = runs.model(size)
        except RuntimeError as e:
            stage.row({"model": size, "result": "not run: %s" % e})
            ok = False
            continue
        lr = 1e-3 if size == "tiny" else 5e-5
        config = ("model:\n  path: %s\ndata:\n  train: %s\n  max_length: 64\ntraining:\n"
                  "  max_steps: %d\n  batch_size: %d\n  effective_batch_size: %d\n"
                  "  learning_rate: %g\n  warmup_ratio: 0.1\n  log_every: 1\n  seed: 42\n"
                  "  hidden_dropout: 0.1\n  attention_dropout: 0.1\n  classifier_dropout: 0.1\n"
                  "  attention: ftune\n" % (model, data, steps, batch, batch, lr))
        try:
            _, cpu, _ = runs.train("parity-%s-cpu" % size, config,
                                   ["training.device=cpu", "training.precision=fp32"])
        except RuntimeError as e:
            stage.row({"model": size, "result": "FAIL: %s" % e})
            ok = False
            continue
        for precision in ("fp32", "bf16"):
            row = {"model": size, "precision": precision, "steps": len(cpu)}
            tol = 1e-4 if precision == "fp32" else 2e-2
            try:
                base = ["training.device=" + runs.device, "training.precision=" + precision]
                summary, dev, _ = runs.train("parity-%s-%s" % (size, precision), config, base)
                diff, at = max_rel_diff(dev, cpu)
                row.update({"max_rel_diff_vs_cpu_fp32": diff, "at_step": at, "tolerance": tol})
                good = diff <= tol
                graphs = summary.get("cuda_graphs", {})
                if graphs.get("on"):
                    _, eager, _ = runs.train("parity-%s-%s-eager" % (size, precision), config,
                                             base + ["training.cuda_graphs=off"])
                    gdiff, _ = max_rel_diff(dev, eager)
                    replays = graphs.get("replayed", 0)
                    row.update({"graphs_vs_off_max_rel_diff": gdiff, "graph_replays": replays})
                    if "failure" in graphs:
                        row["graphs_failure"] = graphs["failure"]
                    graphs_ok = gdiff <= 1e-6 and replays > 0 and "failure" not in graphs
                    paths = summary.get("gpu_paths", {})
                    if not graphs_ok and paths.get("deterministic") is False:
                        # Not the graphs' fault: cuDNN's non-deterministic backward ran.
                        row["graphs_note"] = ("cuDNN ran its non-deterministic attention backward "
                                              "(%s): the difference need not come from the graphs"
                                              % json.dumps(paths.get("cudnn_plans")))
                    good = good and graphs_ok
                else:
                    row["graphs"] = "off: %s" % graphs.get("why", "no cuda_graphs in summary.json")
                    good = good and not on_gpu
                if precision == "fp32" and size == "tiny":
                    # The data-parallel step as one rank (as `mpirun -np 1` starts it): NCCL's
                    # sum over one GPU is a copy, so the losses are the plain run's.
                    one_rank = {"OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0",
                                "OMPI_COMM_WORLD_LOCAL_RANK": "0"}
                    dps, dpl, _ = runs.train("parity-%s-%s-rank" % (size, precision), config,
                                             base, env=one_rank)
                    ddiff, _ = max_rel_diff(dev, dpl)
                    dp = dps.get("data_parallel", {})
                    row.update({"one_rank_max_rel_diff": ddiff,
                                "one_rank_reduction": dp.get("reduction")})
                    want = "nccl" if on_gpu else "mpi"
                    good = good and ddiff <= 1e-6 and dp.get("reduction") == want
                row["result"] = "PASS" if good else "FAIL"
                ok = ok and good
            except RuntimeError as e:
                row["result"] = "FAIL: %s" % e
                ok = False
            stage.row(row)
    rows = [r for r in stage.doc["rows"] if "precision" in r]
    worst = {p: max([r.get("max_rel_diff_vs_cpu_fp32", math.inf) for r in rows
                     if r["precision"] == p] or [math.inf]) for p in ("fp32", "bf16")}
    return ok, "%d runs %s; worst loss diff vs CPU: fp32 %.2g, bf16 %.2g" % (
        len(rows), "pass" if ok else "FAIL", worst["fp32"], worst["bf16"])


def packed(runs, stage, on_gpu):
    steps, batch = (30, 16) if on_gpu else (6, 8)
    data = os.path.join(runs.scratch, "pairs.jsonl")
    write_pair_task(data, steps * batch, seed=2)
    try:
        model = runs.model("tiny")
    except RuntimeError as e:
        return False, "no model: %s" % e
    config = lambda attention_dropout: (
        "model:\n  path: %s\ndata:\n  train: %s\n  max_length: 64\n  packing: on\ntraining:\n"
        "  max_steps: %d\n  batch_size: %d\n  effective_batch_size: %d\n  learning_rate: 1e-3\n"
        "  warmup_ratio: 0.1\n  log_every: 1\n  seed: 42\n  hidden_dropout: 0.1\n"
        "  attention_dropout: %g\n  classifier_dropout: 0.1\n" % (
            model, data, steps, batch, batch, attention_dropout))
    counted = runs.kit.feature("attention_packed_cudnn")  # this build counts packed attention
    ok, refs = True, {}
    for dropout in (0.1, 0.0):
        try:
            _, refs[dropout], _ = runs.train("packed-cpu-%g" % dropout, config(dropout),
                                             ["training.device=cpu", "training.precision=fp32",
                                              "training.attention=ftune"])
        except RuntimeError as e:
            stage.row({"run": "cpu fp32 packed", "result": "FAIL: %s" % e})
            return False, str(e)
    # (name, overrides, reference, tolerance, attention path that must have run packed rows)
    dev = ["training.device=" + runs.device]
    cases = [("packed fp32 vs cpu", dev + ["training.precision=fp32", "training.attention=ftune"],
              "cpu", 1e-4, "packed_ftune", 0.1),
             ("packed bf16 vs cpu", dev + ["training.precision=bf16", "training.attention=ftune"],
              "cpu", 2e-2, "packed_ftune", 0.1),
             ("padded fp32 vs packed fp32", dev + ["training.precision=fp32",
                                                   "training.attention=ftune", "data.packing=off"],
              "packed fp32 vs cpu", 1e-4, None, 0.1)]
    if on_gpu:
        cases.append(("packed bf16 cudnn vs cpu", dev + ["training.precision=bf16",
                                                         "training.attention=cudnn"],
                      "cpu", 2e-2, "packed_cudnn", 0.0))
    losses = {}
    for name, overrides, ref, tol, path, dropout in cases:
        row = {"run": name, "tolerance": tol}
        try:
            s, losses[name], _ = runs.train("packed-" + name.replace(" ", "-"), config(dropout),
                                            overrides)
            against = refs[dropout] if ref == "cpu" else losses.get(ref, {})
            diff, at = max_rel_diff(losses[name], against)
            attention = s.get("gpu_paths", {}).get("attention", {})
            row.update({"max_rel_diff": diff, "at_step": at, "steps": len(losses[name]),
                        "packing": s.get("packing", {}).get("on"),
                        "attention_paths": json.dumps(attention, sort_keys=True)})
            good = diff <= tol and bool(s.get("packing", {}).get("on")) == (path is not None)
            if on_gpu and path and counted:
                good = good and attention.get(path, 0) > 0
                if path == "packed_cudnn":
                    good = good and attention.get("cudnn_refused", 0) == 0
            row["result"] = "PASS" if good else "FAIL"
            ok = ok and good
        except RuntimeError as e:
            row["result"] = "FAIL: %s" % e
            ok = False
        stage.row(row)
    if on_gpu and not counted:
        stage.note("this build has no packed attention counters: the kernels that ran are not checked")
    worst = max([r.get("max_rel_diff", math.inf) for r in stage.doc["rows"]] or [math.inf])
    return ok, "%d packed runs %s; worst loss diff %.2g" % (
        len(stage.doc["rows"]), "pass" if ok else "FAIL", worst)


def memory(runs, stage, on_gpu):
    ok = True
    cases = ([("bert-base", 32, 128), ("minilm", 32, 128)] if on_gpu else [("tiny", 4, 32)])
    for size, batch, length in cases:
        for ckpt in ("off", "on"):
            row = {"model": size, "checkpointing": ckpt, "batch": batch, "max_length": length}
            try:
                config = ("model:\n  path: %s\ndata:\n  train: %s\n  max_length: %d\n"
                          "training:\n  max_steps: %d\n  effective_batch_size: %d\n"
                          "  gradient_checkpointing: %s\n  log_every: 1\n" % (
                              runs.model(size), os.path.join(runs.kit.data, "train.jsonl"),
                              length, 3 if on_gpu else 1, batch, ckpt))
                s, _, _ = runs.train("memory-%s-%s" % (size, ckpt), config,
                                     ["training.device=" + runs.device],
                                     {"FTUNE_GEMM_AUTOTUNE": "0"})
                m = s.get("memory", {})
                planned = m.get("planned_total_bytes")
                measured = m.get("measured_device_bytes", m.get("touched_bytes"))
                row.update({"precision": s.get("precision"), "micro_batch": s.get("micro_batch"),
                            "planned_MiB": round(planned / 2**20, 1) if planned else None,
                            "measured_MiB": round(measured / 2**20, 1) if measured else None,
                            "measured_over_planned": round(measured / planned, 3)
                            if planned and measured else None,
                            "measured_as": "device (cudaMemGetInfo)" if "measured_device_bytes" in m
                            else "arena bytes touched"})
                if not planned or not measured:
                    row["result"] = "FAIL: no plan or measurement in summary.json"
                    ok = False
            except RuntimeError as e:
                row["result"] = "FAIL: %s" % e
                ok = False
            stage.row(row)
    parts = ["%s%s %.0f/%.0f MiB" % (r["model"], " ckpt" if r["checkpointing"] == "on" else "",
                                     r["measured_MiB"], r["planned_MiB"])
             for r in stage.doc["rows"] if r.get("planned_MiB") and r.get("measured_MiB")]
    return ok, "measured/planned: " + (", ".join(parts) if parts else "none")


def profile(runs, stage, on_gpu):
    size, batch, length = ("bert-base", 32, 128) if on_gpu else ("tiny", 8, 32)
    # The last of 8 steps: the micro-batch shapes met before have their cuBLASLt algorithms and
    # cuDNN plans by then, so the step shows steady-state work.
    config = ("model:\n  path: %s\ndata:\n  train: %s\n  max_length: %d\ntraining:\n"
              "  max_steps: %d\n  effective_batch_size: %d\n  log_every: 1\n" % (
                  runs.model(size), os.path.join(runs.kit.data, "train.jsonl"), length,
                  PROFILE_STEPS, batch))
    try:
        s, _, out = runs.train("profile-" + size, config, ["training.device=" + runs.device],
                               {"FTUNE_PROFILE_OPS": "1", "FTUNE_PROFILE_STEP": str(PROFILE_STEPS)})
    except RuntimeError as e:
        return False, str(e)
    path = os.path.join(out, "op_profile.json")
    if not os.path.exists(path):
        return False, ("no op_profile.json: this ftune does not know FTUNE_PROFILE_OPS"
                       if not runs.kit.feature("FTUNE_PROFILE_OPS") else "no op_profile.json")
    with open(path) as f:
        p = json.load(f)
    step = max(p["step_ms"], 1e-9)
    for r in p["ops"][:25]:
        stage.row({"op": r["name"], "ms": round(r["ms"], 3), "pct_of_step": round(100 * r["ms"] / step, 1),
                   "calls": r["calls"]})
    stage.row({"op": "all ops", "ms": round(p["ops_ms"], 3),
               "pct_of_step": round(100 * p["ops_ms"] / step, 1),
               "calls": sum(r["calls"] for r in p["ops"])})
    stage.row({"op": "gap (launch gaps, host waits, non-op work)", "ms": round(p["gap_ms"], 3),
               "pct_of_step": round(100 * p["gap_ms"] / step, 1)})
    stage.note("%s, %s, micro-batch %s x %s tokens max, %s; step %d of %d timed with %s; CUDA "
               "graphs: %s" % (size, s.get("precision"), s.get("micro_batch"), length,
                               p["device"], p["step"], PROFILE_STEPS, p["clock"],
                               s.get("cuda_graphs", {}).get("why", "off")))
    if "gpu_paths" in s:
        stage.note("gpu_paths: " + json.dumps(s["gpu_paths"], sort_keys=True))
    else:
        stage.note("gpu_paths: not built yet (no gpu_paths in summary.json)")
    share = {k: sum(r["ms"] for r in p["ops"] if k in r["name"]) / step for k in ("gemm", "attention")}
    return True, "%s step %.1f ms: GEMMs %.0f%%, attention %.0f%%, gap %.0f%%" % (
        size, p["step_ms"], 100 * share["gemm"], 100 * share["attention"], 100 * p["gap_ms"] / step)


STEADY_STEPS, STEADY_WINDOW = 400, 50


def steady(runs, stage, on_gpu):
    """Where the time of a long run goes (asked for by name: run.sh --stages steady): bf16, batch
    32 of the WordNet pairs (max 128 tokens), STEADY_STEPS steps, samples/s per window of
    STEADY_WINDOW steps; BERT-base with CUDA graphs on and the default padding (auto: length
    buckets, train/input_staging.h), padded to multiples of 8 (every 8th length: the shapes each
    cost an eager warm-up, a capture and cuDNN plans) and of 32 (fewer shapes), graphs off; MiniLM
    with graphs on; the input wait, the graph counters of summary.json and, where the build writes
    them, its gpu_paths captures and cuDNN plan builds with their seconds."""
    big, small, steps, window = (("bert-base", "minilm", STEADY_STEPS, STEADY_WINDOW) if on_gpu
                                 else ("tiny", "tiny", 6, 2))
    config = lambda size: ("model:\n  path: %s\ndata:\n  train: %s\n  max_length: 128\n"
                           "training:\n  max_steps: %d\n  effective_batch_size: 32\n"
                           "  log_every: %d\n" % (runs.model(size),
                                                   os.path.join(runs.kit.data, "train.jsonl"),
                                                   steps, window))
    variants = [(big, "graphs on, pad auto", []),
                (big, "graphs on, pad 8", ["training.pad_to_multiple_of=8"]),
                (big, "graphs off", ["training.cuda_graphs=off"]),
                (big, "graphs on, pad 32", ["training.pad_to_multiple_of=32"]),
                (small, "graphs on, pad auto", [])]
    ok, best = True, {}
    for size, variant, overrides in variants:
        name = "%s %s" % (size, variant)
        if stage.left() < 10:
            stage.row({"variant": name, "result": "not run: the stage's time ran out"})
            ok = False
            continue
        try:
            s, _, out = runs.train("steady-" + name.replace(" ", "").replace(",", "-"), config(size),
                                   ["training.device=" + runs.device] + overrides)
        except RuntimeError as e:
            stage.row({"variant": name, "result": "FAIL: %s" % e})
            ok = False
            continue
        rates = []
        with open(os.path.join(out, "metrics.jsonl")) as f:
            for line in f:
                m = json.loads(line)
                if m.get("split") == "train" and "samples_per_s" in m:
                    rates.append(round(m["samples_per_s"]))
        late = rates[len(rates) // 2:]
        best[name] = sum(late) / len(late) if late else 0
        g = s.get("cuda_graphs", {})
        row = {"variant": name, "samples_per_s_by_window": " ".join(map(str, rates)),
                   "second_half_samples_per_s": round(best[name]),
                   "input_wait_fraction": round(s.get("input_wait_fraction", 0), 3),
                   "graphs_captured": g.get("captured"), "graphs_replayed": g.get("replayed"),
                   "graphs_evicted": g.get("evicted"), "eager_micro_batches": g.get("eager_micro_batches"),
                   "micro_batch": s.get("micro_batch"), "seconds": round(s.get("train_seconds", 0), 1)}
        paths = s.get("gpu_paths")
        if paths:
            pg, pc = paths.get("cuda_graphs", {}), paths.get("cudnn_plans", {})
            row.update({"capture_s": round(pg.get("capture_seconds", 0), 2),
                        "cudnn_plan_builds": pc.get("builds"),
                        "cudnn_plan_s": round(pc.get("build_seconds", 0), 2)})
        stage.row(row)
    return ok, "second half of %d steps, samples/s: %s" % (
        steps, "; ".join("%s %.0f" % kv for kv in best.items()))


def main():
    a = stage_args(__doc__.split("\n\n")[0]).parse_args()
    kit = Kit(a.work)
    stage = Stage(a.stage, a.stages, a.limit)
    runs = Runs(kit, stage, os.path.join(a.logs, a.stage + ".log"), a.device)
    try:
        ok, headline = {"parity": parity, "packed": packed, "memory": memory, "profile": profile,
                        "steady": steady}[a.stage](
            runs, stage, a.device != "cpu")
    except RuntimeError as e:
        ok, headline = False, str(e)
    finally:
        runs.close()
    return stage.finish("ok" if ok else "fail", headline)


if __name__ == "__main__":
    sys.exit(main())
