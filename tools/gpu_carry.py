#!/usr/bin/env python3
"""Packs what a GPU machine without network needs for tools/gpu_check.sh into .cache/gpu/.

The device machine of this project reaches nothing outside itself and takes at most 64 MiB of
ignored files along (the device tool's `carry`). The GPU check wants three things that live in
the ignored .cache/ here:
  - cudnn_frontend's headers (.cache/pydeps/include, 3 MB; tools/install_deps.sh pip-installs
    them), without which the build simply leaves cuDNN attention out;
  - the WordNet gloss pairs of the main job (.cache/data/wordnet-3k, 2 MB);
  - all-MiniLM-L6-v2 (88 MB in fp32: too large), written here with its weights stored as bf16
    (45 MB; ftune and transformers both load bf16 safetensors into fp32 models), plus its
    tokenizer and config files, which the random BERT-base of bench/gpu_vs_hf.sh also uses.
Carry `.cache/gpu`; tools/gpu_check.sh puts each part where the scripts look (a part that is
already there is left alone). The bf16 MiniLM differs from the original by bf16 rounding, which
changes nothing for parity (both sides load the same file) or speed.

    python3 tools/gpu_carry.py            # then carry [".cache/gpu"]
"""

import json
import os
import shutil
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, ".cache")
OUT = os.path.join(CACHE, "gpu")
MINILM_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                "vocab.txt")


def bf16_bits(f32_le: bytes) -> bytes:
    """fp32 little-endian bytes -> bf16 little-endian bytes, round to nearest even."""
    n = len(f32_le) // 4
    words = struct.unpack("<%dI" % n, f32_le)
    out = []
    for w in words:
        if (w & 0x7F800000) == 0x7F800000 and (w & 0x007FFFFF):  # NaN stays a quiet NaN
            out.append((w >> 16) | 0x0040)
        else:
            out.append(((w + 0x7FFF + ((w >> 16) & 1)) >> 16) & 0xFFFF)
    return struct.pack("<%dH" % n, *out)


def write_bf16_safetensors(src: str, dst: str) -> None:
    with open(src, "rb") as f:
        header_len = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(header_len))
        data = f.read()
    meta = header.pop("__metadata__", None)
    out_header, chunks, offset = {}, [], 0
    for name in sorted(header, key=lambda k: header[k]["data_offsets"][0]):
        t = header[name]
        begin, end = t["data_offsets"]
        raw = data[begin:end]
        dtype = t["dtype"]
        if dtype == "F32":
            raw, dtype = bf16_bits(raw), "BF16"
        out_header[name] = {"dtype": dtype, "shape": t["shape"],
                            "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if meta is not None:
        out_header["__metadata__"] = meta
    text = json.dumps(out_header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = dst + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)
    os.replace(tmp, dst)


def copy_tree(src: str, dst: str, what: str) -> None:
    if not os.path.isdir(src):
        sys.exit("gpu_carry: %s not found (%s)" % (src, what))
    shutil.copytree(src, dst)


def main() -> None:
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    copy_tree(os.path.join(CACHE, "pydeps", "include"), os.path.join(OUT, "pydeps", "include"),
              "run tools/install_deps.sh on a machine with nvcc")
    copy_tree(os.path.join(CACHE, "data", "wordnet-3k"), os.path.join(OUT, "data", "wordnet-3k"),
              "run tools/run_main.sh once")
    src = os.path.join(CACHE, "models", "all-MiniLM-L6-v2")
    dst = os.path.join(OUT, "models", "all-MiniLM-L6-v2")
    os.makedirs(dst)
    for name in MINILM_FILES:
        p = os.path.join(src, name)
        if not os.path.isfile(p):
            sys.exit("gpu_carry: %s not found (tools/fetch_minilm.sh)" % p)
        shutil.copy(p, dst)
    write_bf16_safetensors(os.path.join(src, "model.safetensors"),
                           os.path.join(dst, "model.safetensors"))
    total = 0
    for d, _, files in os.walk(OUT):
        total += sum(os.path.getsize(os.path.join(d, f)) for f in files)
    print("gpu_carry: %s holds %.1f MiB (the carry limit is 64 MiB): carry [\".cache/gpu\"]"
          % (OUT, total / 2**20))
    if total > 64 * 2**20:
        sys.exit("gpu_carry: too large to carry")


if __name__ == "__main__":
    main()
