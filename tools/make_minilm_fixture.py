#!/usr/bin/env python3
"""Writes tests/fixtures/minilm/encoder_golden.safetensors: the real pretrained all-MiniLM-L6-v2
encoder's outputs on a handful of sentences and sentence pairs, computed by transformers.

The C++ MiniLM parity test loads the same checkpoint (fetched by tools/fetch_minilm.sh, not
committed: 90 MB), feeds it these token ids and compares. That proves ftune reads a real
pretrained BERT checkpoint (sentence-transformers layout: keys without 'bert.', a legacy
embeddings.position_ids tensor) and computes the same encoder, and, since the ids come from the
model's own fast tokenizer, gives the WordPiece tokenizer a golden answer too.

Tensors (fixed order of rows: 3 single sentences, then 3 pairs; padded right to the longest):
    input_ids, token_type_ids, attention_mask   int64 [N, T]
    hidden                                      float32 [N, T, 384]  BertModel last_hidden_state
    pooler                                      float32 [N, 384]     pooler_output (tanh(W h_CLS + b))
The texts are in the file's metadata ("texts", JSON: [[text, text_pair or null], ...]).

    python tools/make_minilm_fixture.py [MODEL_DIR] [--out tests/fixtures/minilm/encoder_golden.safetensors]
"""

import argparse
import json
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoTokenizer, BertModel

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO / ".cache" / "models" / "all-MiniLM-L6-v2"

# Different lengths; pairs exercise token_type_ids; the last pair has uppercase and accents
# (the uncased tokenizer lowercases and strips them) and a word that splits into pieces.
TEXTS = [
    ("A man is playing a guitar.", None),
    ("Cats sleep.", None),
    ("The quick brown fox jumps over the lazy dog near the riverbank.", None),
    ("A woman is slicing an onion.", "Someone is cutting vegetables in the kitchen."),
    ("Is it raining?", "The streets are dry."),
    ("Café Zürich serves CRÈME BRÛLÉE.", "Das Café in Zürich bietet Nachtisch an."),
]


def main():
    parser = argparse.ArgumentParser(description="Write the all-MiniLM-L6-v2 encoder golden fixture.")
    parser.add_argument("model_dir", nargs="?", type=Path, default=DEFAULT_MODEL,
                        help="HF directory of all-MiniLM-L6-v2 (bash tools/fetch_minilm.sh puts it in the default)")
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "minilm" / "encoder_golden.safetensors")
    args = parser.parse_args()
    if not (args.model_dir / "model.safetensors").exists():
        raise SystemExit(f"{args.model_dir}/model.safetensors not found: run `bash tools/fetch_minilm.sh` first")

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    tokenizer = AutoTokenizer.from_pretrained(str(args.model_dir))
    assert tokenizer.is_fast, "the golden ids must come from the fast (tokenizer.json) tokenizer"
    firsts = [a for a, _ in TEXTS]
    seconds = [b for _, b in TEXTS]
    # A batch call cannot mix singles and pairs, so tokenise each row and pad to the longest.
    rows = [tokenizer(a, b) if b is not None else tokenizer(a) for a, b in TEXTS]
    batch = tokenizer.pad(rows, padding="longest", return_tensors="pt")
    inputs = {k: batch[k].to(torch.int64).contiguous() for k in ("input_ids", "token_type_ids", "attention_mask")}
    # Same ids as the plain batch calls, as a user would get them.
    single = tokenizer(firsts[:3], padding="longest")["input_ids"]
    pair = tokenizer(firsts[3:], seconds[3:], padding="longest")["input_ids"]
    for i, ids in enumerate(single + pair):
        n = sum(1 for t in ids if t != tokenizer.pad_token_id)
        assert ids[:n] == inputs["input_ids"][i, :n].tolist(), i

    model, loading = BertModel.from_pretrained(
        str(args.model_dir), dtype=torch.float32, attn_implementation="eager", output_loading_info=True
    )
    assert not loading["missing_keys"], loading  # the pooler must be real, not freshly initialised
    model.eval()
    with torch.no_grad():
        out = model(**inputs)

    tensors = dict(inputs)
    tensors["hidden"] = out.last_hidden_state.float().contiguous()
    tensors["pooler"] = out.pooler_output.float().contiguous()
    metadata = {
        "format": "pt",
        "texts": json.dumps([[a, b] for a, b in TEXTS], ensure_ascii=False),
        "model": "sentence-transformers/all-MiniLM-L6-v2 (BertModel, eval, fp32, eager attention)",
        "generator": f"tools/make_minilm_fixture.py, torch {torch.__version__.split('+')[0]}, transformers {transformers.__version__}",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(args.out), metadata=metadata)

    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB): " +
          ", ".join(f"{k} {list(v.shape)}" for k, v in tensors.items()))
    for i, ids in enumerate(inputs["input_ids"].tolist()):
        n = int(inputs["attention_mask"][i].sum())
        print(f"  {n:2d} tokens: {' '.join(tokenizer.convert_ids_to_tokens(ids[:n]))}")


if __name__ == "__main__":
    main()
