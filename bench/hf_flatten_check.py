#!/usr/bin/env python3
"""Does Hugging Face's padding-free collator (DataCollatorWithFlattening) support sequence
classification with a BERT-family model? Checks it on the real model the benchmark trains
(all-MiniLM-L6-v2, BertForSequenceClassification) with every attention implementation this
machine has, and prints what it finds as one JSON line:

  - rows: predictions for a flattened batch of R rows (the collator makes ONE row of all tokens:
    a classifier pools one first token, so it predicts once per batch, not once per row);
  - leaks: whether row 2's last hidden state changes when rows are flattened together (attention
    crossing rows: position_ids-based packing detection only exists in transformers' causal-mask
    path, and BERT builds a bidirectional mask from the attention mask alone);
  - the collator's labels: per token with -100 separators (a language-model target).

  python3 bench/hf_flatten_check.py [--model DIR]
Needs torch and transformers; never part of the test suite.
"""
import argparse
import json
import os

import torch
import transformers
from transformers import AutoTokenizer, AutoModelForSequenceClassification
from transformers import DataCollatorWithFlattening

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.environ.get(
        "FTUNE_MINILM_DIR", os.path.join(ROOT, ".cache", "models", "all-MiniLM-L6-v2")))
    ap.add_argument("--attention", default="eager,sdpa,flash_attention_2",
                    help="attention implementations to try (flex_attention compiles with inductor: "
                         "minutes on a CPU)")
    a = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(a.model)
    pairs = [("the bank of the river", "sloping land beside water"),
             ("a bank loan", "a financial institution that accepts deposits"),
             ("he sat by the bank", "a long ridge")]
    feats = [dict(tok(t, p)) for t, p in pairs]
    for f, label in zip(feats, [1, 0, 1]):
        f["labels"] = [label] * len(f["input_ids"])  # the collator flattens token-level labels
    flat = DataCollatorWithFlattening(return_flash_attn_kwargs=True)(feats)
    out = {"transformers": transformers.__version__, "torch": torch.__version__,
           "collator_keys": sorted(flat.keys()),
           "labels_are_per_token": bool(flat["labels"].shape == flat["input_ids"].shape)}
    results = {}
    for impl in a.attention.split(","):
        try:
            model = AutoModelForSequenceClassification.from_pretrained(
                a.model, num_labels=2, attn_implementation=impl).eval()
        except Exception as e:  # noqa: BLE001 - report why the implementation is unavailable
            results[impl] = {"available": False, "why": str(e).splitlines()[0][:160]}
            continue
        with torch.no_grad():
            alone = model.bert(input_ids=torch.tensor([feats[1]["input_ids"]]),
                               token_type_ids=torch.tensor([feats[1]["token_type_ids"]]))
            kwargs = {k: flat[k] for k in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q",
                                           "max_length_k")}
            try:
                packed = model.bert(input_ids=flat["input_ids"], position_ids=flat["position_ids"],
                                    **kwargs)
                logits = model(input_ids=flat["input_ids"], position_ids=flat["position_ids"],
                               **kwargs).logits
            except Exception as e:  # noqa: BLE001
                results[impl] = {"available": True, "runs": False,
                                 "why": str(e).splitlines()[0][:160]}
                continue
        start = len(feats[0]["input_ids"])
        n = len(feats[1]["input_ids"])
        row2 = packed.last_hidden_state[0, start:start + n]
        diff = float((row2 - alone.last_hidden_state[0]).abs().max())
        results[impl] = {"available": True, "runs": True, "predictions": int(logits.shape[0]),
                         "rows": len(feats), "row2_max_abs_diff_vs_alone": diff,
                         "leaks_across_rows": diff > 1e-4}
    out["attention"] = results
    print(json.dumps(out))


if __name__ == "__main__":
    main()
