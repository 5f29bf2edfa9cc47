#!/usr/bin/env python3
"""Proves that Hugging Face transformers loads what ftune saves, and computes the same logits.

    python tools/check_hf_load.py MODEL_DIR INPUTS.safetensors EXPECTED_LOGITS.safetensors [MODEL_DIR ...]

MODEL_DIR is a directory written by ftune (config.json + model.safetensors or a sharded index).
INPUTS holds int64 input_ids and attention_mask, and optionally token_type_ids ([B, T]); the
expected file holds `logits` [B, K] as ftune computed them. The model is loaded with
AutoModelForSequenceClassification in fp32 (transformers 5 would otherwise keep the stored
dtype) with eager attention, run in eval mode, and compared:

    rel = max|hf - ftune| / max|ftune|      (normalised per tensor, like the C++ parity tests)

Several (MODEL_DIR, INPUTS, EXPECTED) triples are checked in one process (torch is imported once).
Exits 0 when, for every triple, rel <= 1e-4 and HF reported no missing, unexpected or mismatched weights; 1 on a
numerical mismatch; 2 when a checkpoint itself does not load cleanly (the worst triple's code). Needs torch and
transformers (tools/requirements-dev.txt); it runs on a development machine, not in CI.
"""

import argparse
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification

REL_TOLERANCE = 1e-4


def check(model_dir, inputs_file, expected_file, tolerance):
    """One checkpoint against ftune's logits; returns the exit code of that check."""
    model, loading = AutoModelForSequenceClassification.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True
    )
    model.eval()
    problems = {k: sorted(v) for k, v in loading.items() if k != "error_msgs" and v}
    if loading.get("error_msgs"):
        problems["error_msgs"] = list(loading["error_msgs"])
    if problems:
        print(f"FAIL: {model_dir} does not load cleanly into {type(model).__name__}: {problems}")
        return 2

    tensors = load_file(inputs_file)
    inputs = {k: tensors[k].to(torch.int64) for k in ("input_ids", "attention_mask", "token_type_ids") if k in tensors}
    for k in ("input_ids", "attention_mask"):
        if k not in inputs:
            print(f"FAIL: {inputs_file} has no tensor '{k}'")
            return 2
    expected = load_file(expected_file)
    if "logits" not in expected:
        print(f"FAIL: {expected_file} has no tensor 'logits'")
        return 2
    want = expected["logits"].to(torch.float64)

    with torch.no_grad():
        got = model(**inputs).logits.to(torch.float64)
    if got.shape != want.shape:
        print(f"FAIL: HF logits have shape {tuple(got.shape)}, expected {tuple(want.shape)}")
        return 1

    max_abs = (got - want).abs().max().item()
    rel = max_abs / max(want.abs().max().item(), 1e-30)
    elementwise = ((got - want).abs() / want.abs().clamp_min(1e-6)).max().item()
    print(
        f"{type(model).__name__} from {model_dir}: logits {tuple(got.shape)} "
        f"max abs diff {max_abs:.3e}, rel (to max|expected|) {rel:.3e}, max elementwise rel {elementwise:.3e}"
    )
    if rel > tolerance:
        print(f"FAIL: rel {rel:.3e} > {tolerance:g}")
        return 1
    print("OK")
    return 0


def main():
    parser = argparse.ArgumentParser(description="Check that HF transformers loads ftune checkpoints.")
    parser.add_argument("cases", nargs="+", metavar="MODEL_DIR INPUTS EXPECTED",
                        help="triples: an ftune model directory, safetensors with input_ids, attention_mask"
                             "[, token_type_ids], safetensors with logits [B, K]")
    parser.add_argument("--tolerance", type=float, default=REL_TOLERANCE, help="relative tolerance (default 1e-4)")
    args = parser.parse_args()
    if len(args.cases) % 3:
        parser.error(f"expected MODEL_DIR INPUTS EXPECTED triples, got {len(args.cases)} paths")

    torch.set_num_threads(1)
    codes = [check(*args.cases[i:i + 3], args.tolerance) for i in range(0, len(args.cases), 3)]
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
