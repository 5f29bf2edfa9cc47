#!/usr/bin/env python3
"""Golden ids of pair templates (tests/fixtures/tokenizers/pair_template.json) on the real Gemma 3
and Llama 3 tokenizer.json files of the shared fixtures ($FTUNE_SHARED_DIR/fixtures/tokenizers):
for each template and text pair, what transformers' fast tokenizer gives for
`tok(template.format(text=a, text_pair=b), add_special_tokens=False)`, i.e. the joined string
tokenized in one piece (ftune tokenizes the pieces apart and must give the same ids).

    FTUNE_SHARED_DIR=... python tools/make_pair_template_fixtures.py
"""

import json
import os
from pathlib import Path

import tokenizers
from transformers import PreTrainedTokenizerFast

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("FTUNE_SHARED_DIR", REPO.parent / "shared")) / "fixtures" / "tokenizers"
TEMPLATES = {
    "gemma3": ["<bos>{text}\n{text_pair}<eos>", "<bos>Premise: {text}\nHypothesis: {text_pair}<eos>"],
    "llama3": ["<|begin_of_text|>{text}\n{text_pair}<|end_of_text|>",
               "<|begin_of_text|>Query: {text}\nDocument: {text_pair}<|end_of_text|>"],
}
PAIRS = [
    ("A man is playing a guitar.", "Someone plays music."),
    ("  leading spaces and trailing ", " two\nlines"),
    ("Ünïcödé — naïve café", "日本語のテキスト。"),
    ("Numbers 12345 and symbols {braces} <tags>", "x"),
]


def main():
    out = {"generator": {"script": "tools/make_pair_template_fixtures.py",
                         "tokenizers": tokenizers.__version__}, "cases": []}
    for name, templates in TEMPLATES.items():
        tok = PreTrainedTokenizerFast(tokenizer_file=str(SHARED / f"{name}.tokenizer.json"))
        for template in templates:
            for a, b in PAIRS:
                ids = tok(template.format(text=a, text_pair=b), add_special_tokens=False)["input_ids"]
                out["cases"].append(dict(tokenizer=name, template=template, text=a, text_pair=b, ids=ids))
    path = REPO / "tests/fixtures/tokenizers/pair_template.json"
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {path} ({len(out['cases'])} cases)")


if __name__ == "__main__":
    main()
