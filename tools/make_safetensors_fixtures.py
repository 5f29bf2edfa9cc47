#!/usr/bin/env python3
"""Writes the safetensors fixtures of tests/io with the reference library (safetensors + torch).

Outputs (tiny, committed under tests/fixtures/io/):
  python_subset.safetensors  tensors of every dtype ftune writes (F32, BF16, F16, I32, I64, U8),
                             including bf16/f16 conversions done by torch, a zero-size tensor, a
                             scalar and a name that needs JSON escaping. The C++ test rebuilds it
                             with write_safetensors (bf16/f16 from the f32 originals) and expects
                             the same bytes.
  python_mixed.safetensors   one tensor per dtype torch can store, for the reader.
  python_mixed.expected.json per tensor of python_mixed: dtype, shape and values as float32
                             (None where ftune cannot convert the dtype).

Run from the repository root:  python3 tools/make_safetensors_fixtures.py
"""
import json
import math
import os

import torch
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "io")

# Values that exercise rounding to bf16 and f16: ties (to even), overflow to inf, subnormals, the
# largest finite values. No NaN: torch turns NaN into bf16 0xffff where ftune writes 0x7fc0.
EDGE = [
    0.0, -0.0, 1.0, -1.0, 0.1, 1.0 / 3.0, -2.5e-6, 1e-20,
    1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 1.0 + 2.0**-8 + 2.0**-20,  # bf16 ties / just above
    1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11,                           # f16 ties
    65504.0, 65519.0, 65520.0, 1e5, -1e5,                         # f16 max, rounds to max / inf
    6e-8, 2.0**-25, 2.0**-25 + 2.0**-40, 3e-8, 1e-40,             # f16 subnormals, f32 subnormal
    3.3895314e38, 3.4028235e38, -3.4028235e38, math.inf, -math.inf,
]


def subset():
    g = torch.Generator().manual_seed(1234)
    edge = torch.tensor(EDGE, dtype=torch.float32)
    weight = torch.randn(3, 5, generator=g) * 3
    tensors = {
        "edge": edge,
        "edge_bf16": edge.to(torch.bfloat16),
        "edge_f16": edge.to(torch.float16),
        "layer.0.weight": weight,
        "layer.0.weight_bf16": weight.to(torch.bfloat16),
        "layer.0.weight_f16": weight.to(torch.float16),
        "ids": torch.tensor([[0, -1, 2**40], [2**63 - 1, -(2**63), 7]], dtype=torch.int64),
        "counts": torch.tensor([1, -2, 2**31 - 1, -(2**31)], dtype=torch.int32),
        "mask": torch.tensor([[0, 1], [255, 128]], dtype=torch.uint8),
        "empty": torch.zeros(0, 4),
        "scalar": torch.tensor(2.5),
        'odd "name"\\ \t\n\x01\x7f é': torch.tensor([42.0]),
    }
    save_file(tensors, os.path.join(OUT, "python_subset.safetensors"), metadata={"format": "pt"})


def mixed():
    values = [1.5, -2.25, 0.0, 3.0]
    tensors = {
        "f32": torch.tensor(values, dtype=torch.float32).reshape(2, 2),
        "f16": torch.tensor(values, dtype=torch.float16),
        "bf16": torch.tensor(values, dtype=torch.bfloat16).reshape(1, 4),
        "f64": torch.tensor([1.0 / 3.0, 1e-3, -7.0, 1e-50], dtype=torch.float64),
        "i64": torch.tensor([[1, -2], [3, 2**40]], dtype=torch.int64),
        "i32": torch.tensor([1, -2, 3], dtype=torch.int32),
        "i16": torch.tensor([1, -2], dtype=torch.int16),
        "i8": torch.tensor([1, -2], dtype=torch.int8),
        "u8": torch.tensor([1, 200], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "u16": torch.tensor([1, 60000], dtype=torch.uint16),
        "u32": torch.tensor([1, 4000000000], dtype=torch.uint32),
        "u64": torch.tensor([1, 2], dtype=torch.uint64),
        "f8_e4m3": torch.tensor([1.0, -0.5], dtype=torch.float8_e4m3fn),
        "f8_e5m2": torch.tensor([2.0], dtype=torch.float8_e5m2),
        "c64": torch.tensor([1 + 2j], dtype=torch.complex64),
        "scalar": torch.tensor(-4.0),
        "zero_size": torch.zeros(2, 0, 3, dtype=torch.bfloat16),
    }
    path = os.path.join(OUT, "python_mixed.safetensors")
    save_file(tensors, path, metadata={"format": "pt", "source": "make_safetensors_fixtures.py"})
    names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
             torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
             torch.uint8: "U8", torch.bool: "BOOL", torch.uint16: "U16", torch.uint32: "U32",
             torch.uint64: "U64", torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2",
             torch.complex64: "C64"}
    expected = {}
    for name, t in tensors.items():
        entry = {"dtype": names[t.dtype], "shape": list(t.shape)}
        if t.dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            entry["f32"] = [float(v) for v in t.to(torch.float32).flatten().tolist()]
        if t.dtype in (torch.int64, torch.int32, torch.uint8, torch.bool):
            entry["int"] = [int(v) for v in t.flatten().tolist()]
        expected[name] = entry
    with open(os.path.join(OUT, "python_mixed.expected.json"), "w") as f:
        json.dump(expected, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    subset()
    mixed()
    print("wrote fixtures to", os.path.normpath(OUT))
