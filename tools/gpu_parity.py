#!/usr/bin/env python3
"""CPU/GPU end-to-end parity: the same training run (same model, data, seed, dropout on) on
training.device=cpu in fp32 and on training.device=cuda in --precision (fp32 or bf16), compared
step by step on the training loss that metrics.jsonl logs at every step (log_every 1). Passes when
the largest relative difference is at most --tolerance (DESIGN: fp32 end to end <= 1e-4, bf16
<= 2e-2; the default follows --precision). Python standard library only.

  python3 tools/gpu_parity.py --ftune build-gpu/ftune [--model DIR] [--steps 50] [--work DIR]
                              [--precision fp32|bf16]

The precision is passed as training.precision=...; an ftune without that key trains in fp32 only,
so its fp32 parity runs without the override and its bf16 parity reports an error.

Without --model it writes a tiny randomly initialised BERT (hidden 64, 2 layers, 4 heads, the
MiniLM WordPiece tokenizer of tests/fixtures) and a synthetic pair task; with --model (e.g.
.cache/models/all-MiniLM-L6-v2) it fine-tunes that model on the same task. Prints one line
`parity <name>: steps N, max rel diff X (step S), PASS|FAIL` and exits 1 on FAIL or error.
"""
import argparse
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_safetensors(path, tensors):
    """tensors: list of (name, shape, list of floats), stored as F32 little-endian."""
    header, offset, blobs = {}, 0, []
    for name, shape, values in tensors:
        blob = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def write_tiny_bert(dir_, seed=3):
    C, L, H, F, P, V, K = 64, 2, 4, 128, 128, 30522, 2
    config = {"architectures": ["BertForSequenceClassification"], "model_type": "bert",
              "vocab_size": V, "hidden_size": C, "num_hidden_layers": L,
              "num_attention_heads": H, "intermediate_size": F, "max_position_embeddings": P,
              "type_vocab_size": 2, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
              "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
              "layer_norm_eps": 1e-12, "pad_token_id": 0, "num_labels": K,
              "id2label": {"0": "0", "1": "1"}, "label2id": {"0": 0, "1": 1}}
    rng = random.Random(seed)

    def normal(*shape):
        return (list(shape), [rng.gauss(0.0, 0.02) for _ in range(math.prod(shape))])

    def const(value, *shape):
        return (list(shape), [value] * math.prod(shape))

    t = {}
    e = "bert.embeddings."
    t[e + "word_embeddings.weight"] = normal(V, C)
    t[e + "word_embeddings.weight"][1][0:C] = [0.0] * C  # padding_idx 0
    t[e + "position_embeddings.weight"] = normal(P, C)
    t[e + "token_type_embeddings.weight"] = normal(2, C)
    t[e + "LayerNorm.weight"] = const(1.0, C)
    t[e + "LayerNorm.bias"] = const(0.0, C)
    for l in range(L):
        p = "bert.encoder.layer.%d." % l
        for m in ("query", "key", "value"):
            t[p + "attention.self.%s.weight" % m] = normal(C, C)
            t[p + "attention.self.%s.bias" % m] = const(0.0, C)
        t[p + "attention.output.dense.weight"] = normal(C, C)
        t[p + "attention.output.dense.bias"] = const(0.0, C)
        t[p + "attention.output.LayerNorm.weight"] = const(1.0, C)
        t[p + "attention.output.LayerNorm.bias"] = const(0.0, C)
        t[p + "intermediate.dense.weight"] = normal(F, C)
        t[p + "intermediate.dense.bias"] = const(0.0, F)
        t[p + "output.dense.weight"] = normal(C, F)
        t[p + "output.dense.bias"] = const(0.0, C)
        t[p + "output.LayerNorm.weight"] = const(1.0, C)
        t[p + "output.LayerNorm.bias"] = const(0.0, C)
    t["bert.pooler.dense.weight"] = normal(C, C)
    t["bert.pooler.dense.bias"] = const(0.0, C)
    t["classifier.weight"] = normal(K, C)
    t["classifier.bias"] = const(0.0, K)
    os.makedirs(dir_, exist_ok=True)
    with open(os.path.join(dir_, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    write_safetensors(os.path.join(dir_, "model.safetensors"),
                      [(name, shape, values) for name, (shape, values) in t.items()])
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(ROOT, "tests", "fixtures", "tokenizers", "minilm", name),
                    os.path.join(dir_, name))


def write_pair_task(path, n, seed):
    """The tiny-model tests' task: label 1 when the pair says "good", 0 when it says "bad"."""
    words = ["red", "green", "car", "house", "bird", "apple", "river", "chair", "book", "cloud"]
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            good = rng.random() < 0.5
            text = " ".join(["the"] + [rng.choice(words) for _ in range(rng.randint(1, 12))])
            pair = " ".join(["good" if good else "bad"] + [rng.choice(words)
                                                          for _ in range(rng.randint(0, 8))])
            f.write(json.dumps({"text": text, "text_pair": pair, "label": int(good)}) + "\n")


def train_losses(ftune, config, device, out_dir, precision="fp32", extra=()):
    cmd = [ftune, "train", "--config", config, "training.device=" + device,
           "output.dir=" + out_dir, "output.overwrite=true", "output.progress=plain"] + list(extra)
    # ftune's attention kernel: cuDNN's (the bf16 default on a GPU) draws other dropout masks.
    r = subprocess.run(cmd + ["training.precision=" + precision, "training.attention=ftune"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0 and "unknown key 'training.precision'" in r.stdout:
        if precision != "fp32":
            raise RuntimeError("this ftune has no training.precision (fp32 only): no %s run"
                               % precision)
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.stdout.write(r.stdout[-4000:])
        last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
        raise RuntimeError("ftune train on %s: exit code %d: %s" % (device, r.returncode, last))
    losses = {}
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if row.get("split") == "train":
                losses[row["step"]] = row["loss"]
    with open(os.path.join(out_dir, "summary.json")) as f:
        summary = json.load(f)
    if summary.get("device") != ("cuda:0" if device == "cuda" else device):
        raise RuntimeError("summary.json of the %s run reports device %r" %
                           (device, summary.get("device")))
    return losses, summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ftune", required=True, help="the ftune binary (built with CUDA)")
    ap.add_argument("--model", help="a HF BERT directory; default: a tiny random one")
    ap.add_argument("--name", help="the name printed in the result line")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--lr", type=float, default=None, help="default 1e-3 tiny, 5e-5 --model")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="the GPU run's training.precision (the CPU run is fp32)")
    ap.add_argument("--tolerance", type=float, default=None,
                    help="largest relative loss difference (default 1e-4 fp32, 2e-2 bf16)")
    ap.add_argument("--device", default="cuda", help="the device compared with cpu")
    ap.add_argument("--work", help="working directory (kept); default: a temporary one")
    a = ap.parse_args()
    name = a.name or (os.path.basename(os.path.normpath(a.model)) if a.model else "tiny-bert")
    name += " " + a.precision
    if a.tolerance is None:
        a.tolerance = 2e-2 if a.precision == "bf16" else 1e-4
    work = a.work or tempfile.mkdtemp(prefix="ftune-parity-")
    os.makedirs(work, exist_ok=True)
    model = a.model
    if not model:
        model = os.path.join(work, "tiny-bert")
        write_tiny_bert(model)
    data = os.path.join(work, "train.jsonl")
    write_pair_task(data, a.steps * a.batch, seed=1)
    lr = a.lr if a.lr is not None else (5e-5 if a.model else 1e-3)
    config = os.path.join(work, "parity.yaml")
    with open(config, "w") as f:
        f.write("model:\n  path: %s\n" % os.path.abspath(model))
        f.write("data:\n  train: %s\n  max_length: %d\n" % (data, a.max_length))
        f.write("training:\n  max_steps: %d\n  batch_size: %d\n  effective_batch_size: %d\n"
                "  learning_rate: %g\n  warmup_ratio: 0.1\n  log_every: 1\n  seed: 42\n"
                "  hidden_dropout: 0.1\n  attention_dropout: 0.1\n  classifier_dropout: 0.1\n"
                % (a.steps, a.batch, a.batch, lr))
        f.write("output:\n  dir: %s\n" % os.path.join(work, "run"))
    try:  # the device first: a missing GPU or precision fails before the CPU run
        gpu, gpu_summary = train_losses(a.ftune, config, a.device,
                                        os.path.join(work, "run-" + a.device), a.precision)
        memory = gpu_summary.get("memory", {})
        # The same run without CUDA graphs: the graphs' replays must give the eager run's losses.
        eager = None
        if gpu_summary.get("cuda_graphs", {}).get("on"):
            eager, _ = train_losses(a.ftune, config, a.device,
                                    os.path.join(work, "run-" + a.device + "-eager"), a.precision,
                                    ["training.cuda_graphs=off"])
        cpu, _ = train_losses(a.ftune, config, "cpu", os.path.join(work, "run-cpu"))
    except (RuntimeError, OSError, ValueError) as e:
        print("parity %s: ERROR %s" % (name, e))
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
        return 1
    steps = sorted(set(cpu) | set(gpu))
    worst, worst_step = 0.0, None
    for s in steps:
        if s not in cpu or s not in gpu:
            print("parity %s: step %s logged on one device only" % (name, s))
            return 1
        diff = abs(cpu[s] - gpu[s]) / max(abs(cpu[s]), 1e-12)
        if not math.isfinite(diff) or diff > worst:
            worst, worst_step = (diff if math.isfinite(diff) else math.inf), s
    ok = len(steps) == a.steps and worst <= a.tolerance
    print("parity %s: steps %d, loss cpu %.6f -> %.6f, max rel diff %.3g (step %s), tolerance %g, "
          "%s" % (name, len(steps), cpu[steps[0]], cpu[steps[-1]], worst, worst_step,
                  a.tolerance, "PASS" if ok else "FAIL"))
    # The memory planner on the device: planned peak (arena + cuBLASLt workspace) next to what the
    # run took (cudaMemGetInfo before the arena minus the lowest free memory seen).
    if "measured_device_bytes" in memory:
        planned, measured = memory["planned_total_bytes"], memory["measured_device_bytes"]
        print("memory %s: planned %.1f MiB, measured %.1f MiB on %s (measured/planned %.3f)" %
              (name, planned / 2**20, measured / 2**20, a.device, measured / planned))
    graphs = gpu_summary.get("cuda_graphs", {})
    if eager is not None:
        gdiff = max((abs(gpu[s] - eager[s]) / max(abs(eager[s]), 1e-12) for s in eager if s in gpu),
                    default=math.inf)
        graphs_ok = (set(eager) == set(gpu) and gdiff <= 1e-6 and graphs.get("replayed", 0) > 0
                     and "failure" not in graphs)
        print("graphs %s: captured %s, replayed %s, eager micro-batches %s%s; max rel loss diff vs "
              "training.cuda_graphs=off %.3g, %s" %
              (name, graphs.get("captured"), graphs.get("replayed"),
               graphs.get("eager_micro_batches"),
               (", FAILED: " + graphs["failure"]) if "failure" in graphs else "", gdiff,
               "PASS" if graphs_ok else "FAIL"))
        paths = gpu_summary.get("gpu_paths", {})
        if not graphs_ok and paths.get("deterministic") is False:
            print("graphs %s: cuDNN ran its non-deterministic attention backward (%s): the "
                  "difference need not come from the graphs" % (name, paths.get("cudnn_plans")))
        ok = ok and graphs_ok
    else:
        print("graphs %s: off (%s)" % (name, graphs.get("why", "no cuda_graphs in summary.json")))
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
