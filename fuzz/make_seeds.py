#!/usr/bin/env python3
"""Writes the seed corpora of fuzz/ (committed): tiny tokenizer.json files covering every
component type, encode inputs, and regex pattern/text pairs. Run from the repository root."""
import os
import tempfile

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

OUT = "fuzz/seeds"
TEXT = ["Hello, world! It's 2024.", "naïve café ÉTÉ 你好 😀", "the-final--countdown 12345", "  spaces\tand\nlines  "] * 5


def tiny_charsmap():
    """A Precompiled charsmap from a 3-rule SentencePiece normalization TSV."""
    import sentencepiece as spm
    from transformers.convert_slow_tokenizer import import_protobuf

    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "rules.tsv"), "w") as f:
            f.write("41\t61\n2160\t49\nFB01\t66 69\n")  # A->a, Roman numeral one->I, fi ligature->fi
        with open(os.path.join(d, "c.txt"), "w") as f:
            f.write("\n".join(TEXT * 20))
        spm.SentencePieceTrainer.train(input=os.path.join(d, "c.txt"), model_prefix=os.path.join(d, "m"),
                                       vocab_size=60, model_type="unigram", normalization_rule_tsv=os.path.join(d, "rules.tsv"),
                                       minloglevel=2, hard_vocab_limit=False)
        m = import_protobuf().ModelProto()
        m.ParseFromString(open(os.path.join(d, "m.model"), "rb").read())
        return m.normalizer_spec.precompiled_charsmap


def save(tok, name):
    tok.save(os.path.join(OUT, "tokenizer_json", name + ".json"))


def main():
    t = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer()
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.train_from_iterator(TEXT, trainers.WordPieceTrainer(vocab_size=80, special_tokens=["[UNK]", "[CLS]", "[SEP]"]))
    t.post_processor = processors.BertProcessing(("[SEP]", 2), ("[CLS]", 1))
    t.decoder = decoders.WordPiece()
    save(t, "wordpiece_bert")

    t = Tokenizer(models.BPE(unk_token="<unk>", continuing_subword_prefix="##", end_of_word_suffix="</w>", fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip(),
                                         normalizers.Replace(Regex(r"\s+"), " ")])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(True),
                                               pre_tokenizers.Punctuation("contiguous")])
    t.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=90, special_tokens=["<unk>", "<s>", "</s>"],
                                                    continuing_subword_prefix="##", end_of_word_suffix="</w>"))
    t.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B:1 </s>:1",
                                                     special_tokens=[("<s>", 1), ("</s>", 2)])
    t.decoder = decoders.BPEDecoder()
    t.add_tokens([AddedToken("x y", single_word=True, lstrip=True, rstrip=True)])
    save(t, "bpe_suffix")

    t = Tokenizer(models.BPE(byte_fallback=True, ignore_merges=True))
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"(?i:'s|'t)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s+(?!\S)|\s+"),
                             "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                    special_tokens=["<|begin|>"]))
    t.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False),
                                            processors.TemplateProcessing(single="<|begin|> $A", pair="<|begin|> $A $B:1",
                                                                          special_tokens=[("<|begin|>", 0)])])
    t.decoder = decoders.ByteLevel()
    save(t, "bytelevel_llama3")

    t = Tokenizer(models.Unigram())
    t.normalizer = normalizers.Sequence([normalizers.Precompiled(tiny_charsmap()), normalizers.Nmt(),
                                         normalizers.Prepend("\u2581"), normalizers.StripAccents()])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                               pre_tokenizers.Metaspace(prepend_scheme="first"),
                                               pre_tokenizers.FixedLength(length=4), pre_tokenizers.CharDelimiterSplit("z")])
    t.train_from_iterator(TEXT, trainers.UnigramTrainer(vocab_size=70, unk_token="<unk>", special_tokens=["<unk>"]))
    t.post_processor = processors.RobertaProcessing(("<unk>", 0), ("<unk>", 0))
    t.decoder = decoders.Sequence([decoders.Metaspace(), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0), decoders.Replace("_", " "), decoders.CTC()])
    save(t, "unigram_precompiled")

    t = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1, "b": 2}, unk_token="<unk>"))
    t.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.NFC(), normalizers.NFKD(), normalizers.ByteLevel()])
    t.pre_tokenizer = pre_tokenizers.Split("b", "merged_with_next", invert=True)
    save(t, "wordlevel")

    for i, text in enumerate(TEXT[:4]):
        for flags in (0, 1, 0x25, 0x93):
            with open(os.path.join(OUT, "encode", f"t{i}_{flags:02x}"), "wb") as f:
                f.write(bytes([i, flags, 20]) + text.encode() + b"\0pair text")
    patterns = [r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+", r"a*", r"", r"\h+\u00e9(?m).",
                r"^x|y$", r"[\w\-]+", r"(?i:ab)c", r"\p{Han}+|\d{1,3}"]
    for i, p in enumerate(patterns):
        with open(os.path.join(OUT, "regex", f"p{i}"), "wb") as f:
            f.write(p.encode() + b"\0" + TEXT[i % 4].encode())


if __name__ == "__main__":
    main()
