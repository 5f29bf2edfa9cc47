#!/usr/bin/env python3
"""Writes the seed corpora of the file-loading fuzz targets (committed) from the committed test
fixtures, with the standard library only: safetensors files of every dtype, tiny model
directories (single file and sharded, f32 / bf16 / f16, BERT and RoBERTa), config.json and
tokenizer_config.json files, PEFT adapters and checkpoint directories. Multi-file seeds use the
fuzz_files.h format ("@@ NAME" lines). Run from the repository root."""
import json
import os
import struct

OUT = "fuzz/seeds"
FX = "tests/fixtures"


def write(target, name, data):
    os.makedirs(os.path.join(OUT, target), exist_ok=True)
    with open(os.path.join(OUT, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def bundle(default, files):
    """The fuzz_files.h format: the default file first (no header), then "@@ NAME" sections."""
    out = files.get(default, b"")
    for name, content in files.items():
        if name != default:
            out += b"\n@@ " + name.encode() + b"\n" + content
    return out


def read_header(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, raw bytes)] laid out in the given order."""
    header, offset, body = {}, 0, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        body += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + body


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def values(dtype, n, seed):
    """Deterministic small values in the storage of `dtype`."""
    floats = [((i * 37 + seed * 11) % 23 - 11) / 16.0 for i in range(n)]
    if dtype == "F32":
        return struct.pack(f"<{n}f", *floats)
    if dtype == "F16":
        return struct.pack(f"<{n}e", *floats)
    if dtype == "BF16":
        return b"".join(struct.pack("<f", v)[2:] for v in floats)  # exact: multiples of 1/16
    raise ValueError(dtype)


# The fixture models' sizes mapped to tiny ones (each fixture size is distinct).
SHRINK = {32: 4, 37: 6, 97: 10, 40: 8}


def tiny_model(fixture, dtype, shards=1):
    """A fixture model directory shrunk to hidden 4, one layer: {file name: bytes}."""
    cfg = json.load(open(f"{FX}/engine/{fixture}/model/config.json"))
    cfg = {k: v for k, v in cfg.items() if v is not None}
    cfg.update(hidden_size=4, intermediate_size=6, vocab_size=10, max_position_embeddings=8,
               num_attention_heads=2, num_hidden_layers=1)
    header, _ = read_header(f"{FX}/engine/{fixture}/model/model.safetensors")
    tensors = []
    for i, (name, e) in enumerate(sorted(header.items())):
        if name == "__metadata__" or ".layer.1." in name:
            continue
        shape = [SHRINK.get(d, d) for d in e["shape"]]  # label counts stay
        tensors.append((name, dtype, shape, values(dtype, numel(shape), i)))
    files = {"config.json": json.dumps(cfg, indent=2, sort_keys=True).encode()}
    if shards == 1:
        files["model.safetensors"] = safetensors(tensors, {"format": "pt"})
        return files
    weight_map = {}
    for k in range(shards):
        part = tensors[k::shards]
        shard = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        files[shard] = safetensors(part, {"format": "pt"})
        weight_map.update({t[0]: shard for t in part})
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": sum(len(t[3]) for t in tensors)}, "weight_map": weight_map},
        indent=2).encode()
    return files


def trainer_state(step, micro_batch=4):
    return {
        "version": 2, "step": step, "epoch": 0, "micro_batch": micro_batch,
        "micro_batches": step * 2, "optimizer_steps": step, "samples": step * 8,
        "real_tokens": step * 100, "skipped_steps": 0, "nonfinite_in_row": 0,
        "loss_scale": 1.0, "loss_scale_good_steps": 0, "train_seconds": 1.5,
        "input_wait_seconds": 0.1,
        "best_eval": {"accuracy": 0.5, "loss": 0.69, "step": step},
        "last_eval": {"accuracy": 0.5, "loss": 0.69, "step": step},
        "early_stopping": {"metric": "accuracy", "best": 0.5, "best_loss": 0.69,
                           "best_step": step, "evals_without_improvement": 0},
        "seed": 42, "gradient_checkpointing": False, "threads": 2,
        "fingerprints": {"model": "0123", "tokenizer": "4567", "data": {"train.tsv": "89ab"},
                         "config": "cdef"},
    }


def main():
    # safetensors: the mixed-dtype fixtures, 16-bit storage with special values, edge headers.
    for name in ("python_mixed", "python_subset"):
        write("safetensors", name, open(f"{FX}/io/{name}.safetensors", "rb").read())
    specials16 = {"BF16": [0x0000, 0x8000, 0x3f80, 0x7f80, 0xff80, 0x7fc0, 0x0001, 0x7f7f],
                  "F16": [0x0000, 0x8000, 0x3c00, 0x7c00, 0xfc00, 0x7e00, 0x0001, 0x7bff]}
    for dtype, bits in specials16.items():
        raw = struct.pack("<8H", *bits)
        write("safetensors", dtype.lower(),
              safetensors([("a", dtype, [2, 4], raw), ("b", dtype, [0, 3], b""),
                           ("c", dtype, [], raw[:2])], {"format": "pt"}))
    write("safetensors", "f64_bool_u8",
          safetensors([("d", "F64", [2], struct.pack("<2d", 1e300, -2.5)),
                       ("m", "BOOL", [3], b"\x00\x01\x01"), ("u", "U8", [1], b"\x07")]))
    write("safetensors", "empty", safetensors([], {}))

    # model_dir: tiny BERT / RoBERTa directories, single and sharded, in each float storage.
    write("model_dir", "bert_f32", bundle("model.safetensors", tiny_model("bert_pair", "F32")))
    write("model_dir", "bert_bf16_sharded",
          bundle("model.safetensors", tiny_model("bert_pair", "BF16", shards=2)))
    write("model_dir", "roberta_f16", bundle("model.safetensors", tiny_model("roberta_pair", "F16")))
    write("model_dir", "xlmr_bf16_sharded",
          bundle("model.safetensors", tiny_model("xlmr_pair", "BF16", shards=3)))

    # model_config: the fixtures' config.json files as they are.
    for fixture in ("bert_pair", "bert_bf16", "roberta_pair", "xlmr_pair", "bert_base_encoder"):
        write("model_config", fixture, open(f"{FX}/engine/{fixture}/model/config.json", "rb").read())

    # tokenizer_config: byte 0 picks the seed tokenizer, then a fixture tokenizer_config.json.
    for i, fixture in enumerate(("minilm", "roberta_bpe", "unigram_precompiled", "wordpiece_cased",
                                 "pipeline_a")):
        text = open(f"{FX}/tokenizers/{fixture}/tokenizer_config.json", "rb").read()
        write("tokenizer_config", fixture, bytes([i]) + text)

    # peft_adapter: the fixture adapters (the target loads them onto the fixture base models).
    for case in ("bert_lora", "bert_dora", "roberta_lora", "bert_rslora"):
        d = f"{FX}/peft/{case}/adapter"
        write("peft_adapter", case, bundle("adapter_config.json", {
            "adapter_config.json": open(f"{d}/adapter_config.json", "rb").read(),
            "adapter_model.safetensors": open(f"{d}/adapter_model.safetensors", "rb").read()}))

    # checkpoint: a run directory with two checkpoints, the best one older.
    files = {"checkpoints/index.json": json.dumps({
        "checkpoints": [{"step": 3, "dir": "step-0000003"}, {"step": 6, "dir": "step-0000006"}],
        "best_step": 3, "last_step": 6}, indent=2).encode()}
    for step in (3, 6):
        d = f"checkpoints/step-{step:07d}"
        files[f"{d}/trainer_state.json"] = json.dumps(trainer_state(step), indent=2).encode()
        files[f"{d}/optimizer.safetensors"] = safetensors(
            [("exp_avg", "F32", [16], values("F32", 16, step)),
             ("exp_avg_sq", "F32", [16], values("F32", 16, step + 1))], {"format": "pt"})
    write("checkpoint", "two_checkpoints", bundle("checkpoints/index.json", files))
    write("checkpoint", "fresh", b'{"checkpoints": [], "best_step": -1, "last_step": -1}')


if __name__ == "__main__":
    main()
