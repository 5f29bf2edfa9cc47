#!/usr/bin/env python3
"""A ModernBERT-style tokenizer for ftune's tokenizer parity test (tests/text/), written beside the
other tokenizer fixtures with the same golden cases (tools/make_tokenizer_fixtures.py, whose corpus
and case generator this imports):

  tests/fixtures/tokenizers/modernbert_bpe/      tokenizer.json + tokenizer_config.json
  tests/fixtures/tokenizers/golden/modernbert_bpe.jsonl.gz

No ModernBERT tokenizer.json is at hand offline, so this one is trained here with the components
of answerdotai/ModernBERT-base's (the OLMo / GPT-NeoX byte-level BPE): an NFC normalizer,
ByteLevel pre-tokenizer (add_prefix_space false, trim_offsets, the GPT-2 regex) and decoder, added
tokens for runs of spaces and |||IP_ADDRESS|||-style markers (normalized, not special), the
special tokens [UNK] [CLS] [SEP] [PAD] [MASK] ([MASK] with lstrip) at the end of the vocabulary,
and a TemplateProcessing post-processor '[CLS] $A [SEP]' / '[CLS] $A [SEP] $B [SEP]' with every
type id 0 (ModernBERT reads no token types).

    /work/venv-oracle/bin/python tools/make_modernbert_tokenizer.py [--out tests/fixtures/tokenizers]
"""
import argparse
import hashlib
import os
import random
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tokenizer_fixtures as mtf  # noqa: E402
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

NAME = "modernbert_bpe"


def train(texts, out_dir):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, show_progress=False,
                                  special_tokens=["<|endoftext|>", "<|padding|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(mtf.training_text(texts), trainer)
    tok.add_tokens([AddedToken("|||IP_ADDRESS|||", normalized=True, special=False),
                    AddedToken("|||EMAIL_ADDRESS|||", normalized=True, special=False)]
                   + [AddedToken(" " * n, normalized=True, special=False) for n in range(24, 1, -1)])
    tok.add_special_tokens([AddedToken("[UNK]", special=True, normalized=False),
                            AddedToken("[CLS]", special=True, normalized=False),
                            AddedToken("[SEP]", special=True, normalized=False),
                            AddedToken("[PAD]", special=True, normalized=False),
                            AddedToken("[MASK]", lstrip=True, special=True, normalized=False)])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    mtf.save_dir(tok, out_dir, {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]",
                                "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                                "mask_token": "[MASK]", "model_max_length": 8192,
                                "model_input_names": ["input_ids", "attention_mask"],
                                "clean_up_tokenization_spaces": True})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(mtf.ROOT, "tests/fixtures/tokenizers"))
    out = ap.parse_args().out
    texts, long_ids = mtf.build_corpus()
    pairs = mtf.build_pairs(texts, long_ids, random.Random(7))
    corpus_sha = hashlib.sha256("\n".join(texts).encode("utf-8", "surrogatepass")).hexdigest()
    d = os.path.join(out, NAME)
    train(texts, d)
    spec = {"dir": d, "file": os.path.join(d, "tokenizer.json"), "config": True, "source": "fixtures", "scale": 1}
    cases = mtf.make_cases(NAME, spec, texts, pairs, long_ids, random.Random(zlib.crc32(NAME.encode())), 1)
    versions = {"tokenizers": mtf.tokenizers.__version__, "transformers": mtf.transformers.__version__,
                "python_unicode": mtf.unicodedata.unidata_version}
    header = {"tokenizer": NAME, "source": "fixtures", "generator": "tools/make_modernbert_tokenizer.py", "versions": versions,
              "corpus_sha256": corpus_sha, "cases": len(cases)}
    mtf.write_jsonl_gz(os.path.join(out, "golden", NAME + ".jsonl.gz"), header, cases)
    print(f"{NAME}: {len(cases)} cases")


if __name__ == "__main__":
    main()
