#!/usr/bin/env python3
"""Golden token ids from Hugging Face for ftune's tokenizer parity tests (tests/text/).

Writes to tests/fixtures/tokenizers/ (committed; run again only to regenerate):
  corpus.jsonl.gz          the texts: WordNet glosses and examples (Debian wordnet-base),
                           multilingual lines (CJK, Arabic, Devanagari, Turkish, Vietnamese...),
                           emoji and ZWJ sequences, control characters, runs of whitespace and
                           digits, added-token look-alikes, sampled Unicode blocks, seeded random
                           mixes, and long paragraphs for truncation. Deterministic.
  minilm/                  all-MiniLM-L6-v2's tokenizer.json + tokenizer_config.json (Apache-2.0)
  roberta_bpe/             byte-level BPE trained here with HF's trainer, RoBERTa-style
  unigram_precompiled/     SentencePiece Unigram trained here, converted by transformers'
                           DebertaV2Converter (Precompiled charsmap, Strip, Replace, Punctuation,
                           Metaspace prepend_scheme=first, [CLS]/[SEP] template)
  wordpiece_cased/         cased WordPiece trained here with HF's trainer
  pipeline_a/, pipeline_b/, pipeline_c/
                           small trained models with other normalizers / pre-tokenizers /
                           post-processors / added-token options, so every component is covered
  golden/<name>.jsonl.gz   per tokenizer: the reference ids for every case (see below)
  unicode_probe.jsonl.gz   HF's character classes and single-character mappings for every code
                           point (whitespace, punctuation, BERT control / Mn, combining marks,
                           numeric, regex \w, Oniguruma \p{L} \p{N} \p{M} \s \w \d; lowercase,
                           NFC/NFD/NFKC/NFKD)

Tokenizers from ../shared/fixtures/tokenizers (Gemma-3, Llama-2, Llama-3) are read there and not
copied; only their golden ids are committed. "llama2_config" is Llama-2's tokenizer.json with a
tokenizer_config.json (the test rebuilds that directory): transformers 5 ignores its
add_bos_token / add_eos_token when a tokenizer.json exists, and pads with its pad_token.

The reference is transformers' fast tokenizer, called as users call it:
`tokenizer(text, text_pair, ...)`, loaded with AutoTokenizer from the directory (so that
tokenizer_config.json applies) or PreTrainedTokenizerFast(tokenizer_file=...) for a bare file.
Plain `tokenizers.Tokenizer.encode` (stored truncation/padding disabled) is checked to agree on
the default cases. Decoding goldens are `tokenizer.backend_tokenizer.decode` (the tokenizers
decoder, without transformers' clean_up_tokenization_spaces).

Case records (one JSON object per line, after a header line):
  {"k":"s","i":I, "ids":[..], "tt":RLE}                          tokenizer(text[I])
  {"k":"p","i":I,"j":J, "ids":[..], "tt":RLE}                    tokenizer(text[I], text[J])
  {"k":"n","i":I,"j":J|null, "ids":[..], "tt":RLE}               add_special_tokens=False
  {"k":"t","i":I,"j":J|null,"max":M,"strat":S,"side":D, "ids":[..],"tt":RLE,"stm":RLE} or "err":1
  {"k":"pad","i":I,"j":J|null,"max":M|null,"mult":K|null,"side":D, "ids","tt","am","stm"}
  {"k":"b","is":[..],"js":[..]|null, "ids":[[..]..], "am":[RLE..]}  batch, padding=True
  {"k":"d","ids":[..],"skip":0|1,"text":"..."}                   decode
RLE is [[value, count], ...].

Reproducibility: the corpus, the goldens of MiniLM, Gemma-3, Llama-2/3, roberta_bpe,
unigram_precompiled and the Unicode probe come out byte-identical on every run. HF's WordPiece
and Unigram trainers break ties in hash-map order, so wordpiece_cased and pipeline_* may train
slightly differently each time; their goldens always match the tokenizer.json written with them.
Check fresh output before committing it:
  python3 tools/make_tokenizer_fixtures.py --out /tmp/fx && FTUNE_TOKENIZER_FIXTURES=/tmp/fx build/tests/test_text

Usage: python3 tools/make_tokenizer_fixtures.py [--shared DIR] [--minilm DIR] [--out DIR]
Needs: tokenizers, transformers, sentencepiece, protobuf (pip); wordnet-base (apt).
"""
import argparse
import gzip
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import unicodedata
import zlib

import tokenizers
import transformers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDNET = "/usr/share/wordnet"


# ----------------------------------------------------------------------------------------------
# Corpus


def wordnet_glosses():
    """(definition, [examples]) for every synset, in file order."""
    out = []
    for pos in ("noun", "verb", "adj", "adv"):
        with open(os.path.join(WORDNET, "data." + pos), encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  ") or "|" not in line:
                    continue
                gloss = line.split("|", 1)[1].strip()
                parts = [p.strip() for p in gloss.split(";")]
                definition = parts[0]
                examples = [p.strip('"').strip() for p in parts[1:] if p.startswith('"')]
                out.append((definition, examples))
    return out


MULTILINGUAL = [
    "北京是中华人民共和国的首都，也是全国的政治中心。",
    "我爱自然语言处理。机器学习很有趣！",
    "東京タワーは日本の電波塔です。カタカナとひらがなと漢字",
    "안녕하세요, 세계! 한국어 형태소 분석은 어렵습니다.",
    "مرحبا بالعالم! اللغة العربية جميلة جداً.",
    "السَّلَامُ عَلَيْكُمْ وَرَحْمَةُ اللهِ",
    "שלום עולם, עברית נכתבת מימין לשמאל.",
    "हिन्दी भाषा में क्षत्रिय, ज्ञान और श्री जैसे संयुक्ताक्षर हैं।",
    "नमस्ते दुनिया! कृपया ध्यान दें: ऋषि, कॉफ़ी, ज़िंदगी",
    "বাংলা ভাষা সুন্দর। தமிழ் மொழி. తెలుగు భాష",
    "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
    "İstanbul'da ılık bir gün. IŞIK ışık İĞNE iğne ıi İI",
    "TÜRKÇE KARAKTERLER: ÇĞİÖŞÜ çğıöşü",
    "Tiếng Việt có dấu: Ầ ầ Ẩ ẩ Ặ ặ Ỗ ỗ ữ Ự",
    "Tiê\u0301ng Vi\u00ea\u0323t (decomposed) A\u0302\u0300 a\u0323\u0302",
    "Ελληνικά: ΟΔΥΣΣΕΥΣ Σίσυφος ΣΙΣΥΦΟΣ ς σ Σ",
    "Русский язык: Ёлка, ЁЖИК, щёлк. Україна: Ґанок ї є",
    "Straße, STRASSE, Maß, ẞ, Fußball",
    "ﬁne ﬂow ﬀ Œuvre œuvre Æsir æ ĳ Ĳ",
    "ＡＢＣ　ｄｅｆ　１２３！？ ｶﾀｶﾅ",
    "① ② ⑩ ㎏ ㎞ ™ ℃ № ½ ¼ x² H₂O ℌ ℍ 𝐀𝐁𝐂 𝔸𝔹ℂ",
    "Ça va? Où est l'hôtel? Naïve café, crème brûlée, façade",
    "¿Qué tal? ¡Muy bien! El niño comió piña.",
    "Ångström, Øresund, Åland, smørrebrød",
    "Zürich, Köln, Ärger, Öl, Übermut",
    "Łódź, Kraków, źdźbło, Gdańsk",
    "Čeština: příliš žluťoučký kůň úpěl ďábelské ódy",
    "Română: știință, țară, ȘTIINȚĂ",
    "Ἐν ἀρχῇ ἦν ὁ λόγος",
    "ქართული ენა, Հայերեն լեզու, ᎠᏂᏴᏫ",
    "አማርኛ ቋንቋ ፣ ትግርኛ ።",
    "ᠮᠣᠩᠭᠣᠯ ᠪᠢᠴᠢᠭ ᠠ᠋ ᠡ᠋",
    "ꦧꦱꦗꦮ ꦱꦸꦤ꧀ꦢ Javanese script",
    "Hangul jamo: ᄀᄁᄂ ᅡᅢ ᆨᆩ, compatibility ㄱㄴㄷ",
    "Mixed 中文English混合text测试123数字",
    "日本語とEnglishのmixed文章です。2024年",
]

EMOJI = [
    "I love it 😀😃😄😁😆",
    "Family: 👩‍👩‍👧‍👦 and 👨‍👩‍👧 and 👨‍💻",
    "Flags: 🇺🇸🇫🇷🇩🇪🇯🇵 and 🏳️‍🌈 🏴‍☠️",
    "Skin tones: 👍🏻👍🏼👍🏽👍🏾👍🏿 👋🏽",
    "Keycaps: 1️⃣ 2️⃣ #️⃣ *️⃣",
    "Newer emoji: 🥰 🥳 🫠 🫶 🪿 🩷",
    "Text vs emoji presentation: ☺ ☺️ ❤ ❤️ ✌️",
    "🧑🏽‍🚀 astronaut, 🏃‍♀️‍➡️ runner",
    "🎉🎉🎉🎉🎉🎉🎉🎉🎉🎉",
]

CONTROL = [
    "null\x00byte",
    "ctrl\x01\x02\x03chars\x1f\x7f",
    "tab\there\tand\nnewline\r\nwindows",
    "nel\u0085here, nbsp\u00a0here, ideographic\u3000space",
    "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom",
    "soft\u00adhyphen, bidi\u202eoverride\u202c, lrm\u200e",
    "line\u2028separator\u2029paragraph",
    "vertical\x0btab form\x0cfeed",
    "replacement \ufffd char",
    "private use \ue000\uf8ff \U000f0000",
    "\u0301 starts with a combining mark",
    "\u0300\u0301\u0302 three marks first",
    "ends with marks e\u0301\u0302",
    "noncharacters \ufdd0 \uffff",
    "unassigned \u0378 \U000e0080",
    "tag chars \U000e0041\U000e0042",
    "variation selectors \ufe0e\ufe0f \U000e0100",
]

WHITESPACE_DIGITS = [
    "",
    " ",
    "   ",
    "\n",
    "\t\t\t",
    " leading space",
    "trailing space ",
    "   many   spaces   between   words   ",
    "a" + " " * 60 + "b",
    "x\n\n\n\ny",
    "\n\n\t  mixed \r\n\t whitespace \u3000\u00a0 end",
    "1234567890" * 8,
    "3.14159265358979323846264338327950288419716939937510",
    "1,000,000 and 2.5e-10 and 0x1F and 007",
    "abc123def456ghi789",
    "Phone: +1 (555) 123-4567, zip 90210-1234",
    "٠١٢٣٤٥٦٧٨٩ ۰۱۲۳ १२३४५ ১২৩ ๑๒๓",
    "１２３４５ fullwidth digits",
    "2024-01-15T10:30:00Z",
    "IP 192.168.0.1:8080/path?q=1&r=2#frag",
    "...!!!???,,,;;;:::---___",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE it's IT'S don't DON'T we'll",
    "it'ſ the long s and the Kelvin K sign",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "x" * 150,
    "email@example.com https://www.example.org/a/b_c-d.html",
    "snake_case_name camelCaseName PascalCase SCREAMING_CASE kebab-case",
    "C++ C# F# .NET node.js @mention #hashtag $100 50% a&b",
    "def f(x):\n    return x ** 2  # comment\n",
    "<html><body class=\"x\">Hello &amp; bye</body></html>",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
    "tab-separated\tvalues\tin\ta\trow",
]

ADDED_LOOKALIKES = [
    "[CLS] hello [SEP] world [SEP]",
    "[MASK] is a mask and [UNK] unknown, [PAD] [PAD]",
    "[mask] lowercase [Mask]",
    "<s> a </s> b <pad> <unk> <mask> c",
    "<s>glued</s><s>",
    "  <mask>  spaced mask  ",
    "<|begin_of_text|>Hello<|end_of_text|> <|reserved_special_token_0|>",
    "<|begin_of_text <|end|> <| |>",
    "<bos>Gemma<eos><start_of_turn>user\nhi<end_of_turn>",
    "<start_of_image> <image_soft_token> <unused0> <unused6241>",
    "<0x41> <0xFF> byte tokens",
    "Tokens like ▁ and ▁▁ and Ġ and ##ing",
    "<ent>x</ent> <ent> foo bar Foo Bar [X] a[X]b",
]

# Blocks sampled for the Unicode sweep (start, end): 32 consecutive code points per line.
SWEEP_BLOCKS = [
    (0x00A0, 0x0250), (0x0250, 0x0370), (0x0300, 0x0370), (0x0370, 0x0530), (0x0530, 0x0600),
    (0x0600, 0x0700), (0x0900, 0x0A00), (0x0E00, 0x0E80), (0x1100, 0x1200), (0x1E00, 0x1F00),
    (0x1F00, 0x2000), (0x2000, 0x2070), (0x2070, 0x2200), (0x2460, 0x2500), (0x2E00, 0x2E60),
    (0x3000, 0x3100), (0x3130, 0x3190), (0x3200, 0x3400), (0xA700, 0xA800), (0xA960, 0xAA00),
    (0xAC00, 0xAC40), (0xF900, 0xF940), (0xFB00, 0xFB50), (0xFE00, 0xFE70), (0xFF00, 0xFFF0),
    (0x10780, 0x107C0), (0x111C0, 0x111E0), (0x1D400, 0x1D480), (0x1F100, 0x1F200),
    (0x1F300, 0x1F400), (0x1F900, 0x1FA00), (0x1FB00, 0x1FC00), (0x20000, 0x20040),
]


def assigned_by_unicode_14(c):
    """Characters assigned after Unicode 14.0 are left out: PCRE2 10.42 (regex classes) knows
    Unicode 14.0 and ICU 72 (everything else) 15.0, while HF's Rust crates know 16.0. Python 3.11's
    unicodedata is 14.0, so "Cn" there means "unassigned in 14.0"; unassigned code points that
    are still unassigned in 16.0 are kept (the tests below keep some)."""
    return unicodedata.category(chr(c)) != "Cn" or c in STILL_UNASSIGNED


# Unassigned in every Unicode version so far; kept in the corpus on purpose.
STILL_UNASSIGNED = {0x0378, 0x0379, 0xE0080, 0xFDD0, 0xFFFF}


def sweep_lines():
    lines = []
    for start, end in SWEEP_BLOCKS:
        for b in range(start, end, 32):
            cps = [c for c in range(b, min(b + 32, end)) if not 0xD800 <= c <= 0xDFFF and assigned_by_unicode_14(c)]
            if not cps:
                continue
            lines.append("".join(chr(c) for c in cps))
            lines.append(" ".join("a" + chr(c) for c in cps[:16]))
    return lines


def random_lines(rng, n):
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789", " \t\n  ", ".,;:!?'\"()[]{}<>-_/\\|@#$%^&*+=~`",
        "àáâãäåçèéêëìíîïñòóôõöùúûüýÿÀÁÂÃÄÅÇÈÉÊËÌÍÎÏÑÒÓÔÕÖÙÚÛÜÝİıŞşĞğ",
        "\u0300\u0301\u0302\u0303\u0308\u0323\u0327\u093c\u094d\u0652",
        "中文字符測試日本語カタカナひらがな한국어",
        "مرحباالعربية", "हिन्दीक्षत्रज्ञ", "αβγδεΣσςΩω", "абвгдЁёЖж",
        "😀👍🏽‍👩🇺🇸❤️\ufe0f\u200d", "\x00\x01\x1f\x7f\u0085\u200b\ufeff\u00ad\u2028",
        "①½™ﬁＡ１", "▁Ġ#", "[]<>|/sCLSEPMAKUN",
    ]
    out = []
    for _ in range(n):
        k = rng.randint(1, 60)
        s = []
        for _ in range(k):
            pool = pools[rng.randrange(len(pools))]
            s.append(pool[rng.randrange(len(pool))] * (1 if rng.random() < 0.9 else rng.randint(2, 6)))
        out.append("".join(s))
    return out


def build_corpus():
    rng = random.Random(20240515)
    glosses = wordnet_glosses()
    texts = []
    # WordNet: every 60th synset's definition and examples (about 3,900 texts).
    for definition, examples in glosses[::60]:
        texts.append(definition)
        texts.extend(examples[:2])
    # Capitalized / shouted variants of some glosses.
    for definition, _ in glosses[7::997]:
        texts.append(definition.capitalize())
        texts.append(definition.upper())
    texts += MULTILINGUAL + EMOJI + CONTROL + WHITESPACE_DIGITS + ADDED_LOOKALIKES
    texts += sweep_lines()
    texts += random_lines(rng, 250)
    # Long paragraphs (for truncation): 8 to 40 glosses joined.
    long_start = len(texts)
    for k in range(60):
        start = rng.randrange(len(glosses) - 50)
        n = rng.randint(8, 40)
        texts.append(" ".join(d for d, _ in glosses[start : start + n]))
    long_ids = list(range(long_start, len(texts)))
    return texts, long_ids


def build_pairs(texts, long_ids, rng):
    """GlossBERT-style (definition, example) pairs, mixed pairs and long pairs."""
    pairs = []
    n = len(texts)
    for i in range(0, min(n, 3000), 3):
        pairs.append((i, (i + 1) % n))
    for _ in range(300):
        pairs.append((rng.randrange(n), rng.randrange(n)))
    for a in long_ids:
        pairs.append((a, rng.choice(long_ids)))
        pairs.append((a, rng.randrange(n)))
        pairs.append((rng.randrange(n), a))
    return pairs


# ----------------------------------------------------------------------------------------------
# Trained tokenizers


def training_text(texts):
    return [t for t in texts if t.strip()]


def save_dir(tok, out_dir, config):
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2, ensure_ascii=False, sort_keys=True)
        f.write("\n")


def train_roberta_bpe(texts, out_dir):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, show_progress=False,
                                  special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(texts), trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False)])
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
                                                      trim_offsets=True, add_prefix_space=False)
    save_dir(tok, out_dir, {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                            "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>", "cls_token": "<s>",
                            "sep_token": "</s>", "model_max_length": 512})


def train_wordpiece_cased(texts, out_dir):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False,
                                                lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=4000, show_progress=False,
                                        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tok.train_from_iterator(training_text(texts), trainer)
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]")))
    save_dir(tok, out_dir, {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "sep_token": "[SEP]",
                            "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]", "model_max_length": 512,
                            "padding_side": "right", "truncation_side": "right"})


def train_unigram_precompiled(texts, out_dir, work):
    import sentencepiece as spm
    from transformers.convert_slow_tokenizer import DebertaV2Converter

    path = os.path.join(work, "spm.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(t.replace("\n", " ") for t in training_text(texts)))
    prefix = os.path.join(work, "spm")
    spm.SentencePieceTrainer.train(input=path, model_prefix=prefix, vocab_size=4000, model_type="unigram",
                                   character_coverage=0.98, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
                                   control_symbols=["[CLS]", "[SEP]", "[MASK]"], user_defined_symbols=["<ent>"],
                                   normalization_rule_name="nmt_nfkc", minloglevel=2, seed_sentencepiece_size=200000,
                                   num_threads=1)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")

    class Original:  # what DebertaV2Converter reads from the slow tokenizer
        vocab_file = prefix + ".model"
        do_lower_case = False
        split_by_punct = True
        add_prefix_space = True
        legacy = False  # -> Metaspace prepend_scheme "first"

        def convert_tokens_to_ids(self, t):
            return sp.piece_to_id(t)

    tok = DebertaV2Converter(Original()).converted()
    save_dir(tok, out_dir, {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>", "pad_token": "<pad>",
                            "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]", "model_max_length": 512})


def train_pipelines(texts, out_base):
    """Small models with other components, so that every normalizer, pre-tokenizer, model option
    and post-processor HF knows appears in some fixture."""
    data = training_text(texts)[:2500]  # WordNet text: characters outside it exercise unknown tokens

    # A: WordPiece; NFKC + Replace(regex) + Strip; Whitespace + Digits(individual); template with a
    # two-token special; added tokens with single_word / lstrip / rstrip / normalized.
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=30))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(r"\s+"), " "),
                                           normalizers.Strip(left=True, right=True)])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)])
    tok.train_from_iterator(data, trainers.WordPieceTrainer(vocab_size=1500, show_progress=False,
                                                            special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[X]"]))
    tok.add_tokens([AddedToken("<ent>", single_word=True), AddedToken("foo bar", normalized=True),
                    AddedToken("Foo Bar", normalized=False)])
    tok.add_special_tokens([AddedToken("[X]", lstrip=True, rstrip=True, special=True, normalized=False)])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] [SEP2]:1 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep),
                        {"id": "[SEP2]", "ids": [sep, sep], "tokens": ["[SEP]", "[SEP]"]}])
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    save_dir(tok, os.path.join(out_base, "pipeline_a"),
             {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "pad_token": "[PAD]",
              "model_max_length": 256, "padding_side": "left", "truncation_side": "left"})

    # B: BPE with continuing prefix and end-of-word suffix, unk fusing; NFD + StripAccents +
    # Lowercase + Nmt; Punctuation(merged_with_previous) + Split(string, contiguous) +
    # WhitespaceSplit; Sequence post-processor (ByteLevel + template).
    tok = Tokenizer(models.BPE(unk_token="<unk>", continuing_subword_prefix="##", end_of_word_suffix="</w>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(),
                                           normalizers.Nmt()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Punctuation(behavior="merged_with_previous"),
        pre_tokenizers.Split("-", behavior="contiguous"),
        pre_tokenizers.WhitespaceSplit()])
    tok.train_from_iterator(data[: len(data) // 2], trainers.BpeTrainer(
        vocab_size=1200, show_progress=False, special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
        continuing_subword_prefix="##", end_of_word_suffix="</w>", limit_alphabet=120))
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B:1 </s>:1",
                                      special_tokens=[("<s>", bos), ("</s>", eos)])])
    tok.decoder = decoders.BPEDecoder(suffix="</w>")
    save_dir(tok, os.path.join(out_base, "pipeline_b"),
             {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>", "pad_token": "<pad>",
              "bos_token": "<s>", "eos_token": "</s>", "model_max_length": 128})

    # C: Unigram (HF trainer); BertNormalizer(strip_accents, no lowercase) + NFC + Prepend;
    # Split(regex, invert, merged_with_next) + Metaspace(first, no split); added tokens.
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([
        normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=True, lowercase=False),
        normalizers.NFC(), normalizers.Prepend("\u2581")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{N}+|[\p{P}\p{S}]"), behavior="merged_with_next", invert=False),
        pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)])
    tok.train_from_iterator(data[::2], trainers.UnigramTrainer(vocab_size=1500, show_progress=False,
                                                               special_tokens=["<unk>", "<cls>", "<sep>", "<pad>"],
                                                               unk_token="<unk>"))
    tok.add_tokens([AddedToken("Hello", normalized=True, rstrip=True), AddedToken("<ent>", normalized=False)])
    cls, sep = tok.token_to_id("<cls>"), tok.token_to_id("<sep>")
    tok.post_processor = processors.BertProcessing(("<sep>", sep), ("<cls>", cls))
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
    save_dir(tok, os.path.join(out_base, "pipeline_c"),
             {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>", "pad_token": "<pad>",
              "model_max_length": 96})


# ----------------------------------------------------------------------------------------------
# Goldens


def rle(values):
    out = []
    for v in values:
        if out and out[-1][0] == v:
            out[-1][1] += 1
        else:
            out.append([v, 1])
    return out


def load_reference(spec):
    if spec["config"]:
        return AutoTokenizer.from_pretrained(spec["dir"])
    return PreTrainedTokenizerFast(tokenizer_file=spec["file"])


def make_cases(name, spec, texts, pairs, long_ids, rng, scale):
    hf = load_reference(spec)
    raw = Tokenizer.from_file(spec["file"])
    raw.no_truncation()
    raw.no_padding()
    cases = []
    disagree = 0

    def call(text, pair=None, **kw):
        return hf(text, pair, return_token_type_ids=True, return_special_tokens_mask=True, **kw)

    n_single = len(texts) if scale >= 1 else int(len(texts) * scale)
    single_ids = list(range(len(texts)))
    if scale < 1:
        single_ids = sorted(rng.sample(single_ids, n_single))
    for i in single_ids:
        e = call(texts[i])
        cases.append({"k": "s", "i": i, "ids": e["input_ids"], "tt": rle(e["token_type_ids"])})
        if raw.encode(texts[i]).ids != e["input_ids"]:
            disagree += 1
    pair_list = pairs if scale >= 1 else rng.sample(pairs, int(len(pairs) * scale))
    for i, j in pair_list:
        e = call(texts[i], texts[j])
        cases.append({"k": "p", "i": i, "j": j, "ids": e["input_ids"], "tt": rle(e["token_type_ids"])})
        if raw.encode(texts[i], texts[j]).ids != e["input_ids"]:
            disagree += 1
    for i, j in rng.sample(pairs, 100):
        for jj in (None, j):
            e = call(texts[i], None if jj is None else texts[jj], add_special_tokens=False)
            cases.append({"k": "n", "i": i, "j": jj, "ids": e["input_ids"], "tt": rle(e["token_type_ids"])})
    # Truncation: every strategy, both sides, several lengths, single and pair.
    trunc_inputs = [(a, b) for a, b in pairs if a in long_ids or b in long_ids]
    trunc_inputs = rng.sample(trunc_inputs, min(len(trunc_inputs), 40)) + rng.sample(pairs, 20)
    for i, j in trunc_inputs:
        for jj in (None, j):
            for m in (1, 5, 16, 64, 200):
                for strat in ("longest_first", "only_first", "only_second"):
                    for side in ("right", "left"):
                        if rng.random() < 0.5:
                            continue
                        hf.truncation_side = side
                        rec = {"k": "t", "i": i, "j": jj, "max": m, "strat": strat, "side": side}
                        try:
                            e = call(texts[i], None if jj is None else texts[jj], truncation=strat, max_length=m)
                            rec.update(ids=e["input_ids"], tt=rle(e["token_type_ids"]),
                                       stm=rle(e["special_tokens_mask"]))
                        except Exception:
                            rec["err"] = 1
                        cases.append(rec)
    hf.truncation_side = spec.get("truncation_side", "right")
    # Padding.
    pad_ok = hf.pad_token is not None
    if pad_ok:
        for i, j in rng.sample(pairs, 40):
            for jj in (None, j):
                for m, mult, side in ((None, 8, "right"), (64, None, "right"), (64, None, "left"), (100, 16, "left")):
                    kw = {"padding_side": side}
                    if m is not None:
                        kw.update(padding="max_length", max_length=m)
                    else:
                        kw.update(padding=True)
                    if mult is not None:
                        kw["pad_to_multiple_of"] = mult
                    e = call(texts[i], None if jj is None else texts[jj], **kw)
                    cases.append({"k": "pad", "i": i, "j": jj, "max": m, "mult": mult, "side": side,
                                  "ids": e["input_ids"], "tt": rle(e["token_type_ids"]),
                                  "am": rle(e["attention_mask"]), "stm": rle(e["special_tokens_mask"])})
        for _ in range(10):
            batch = rng.sample(pairs, 8)
            is_ = [a for a, _ in batch]
            js = [b for _, b in batch] if rng.random() < 0.5 else None
            e = hf([texts[a] for a in is_], None if js is None else [texts[b] for b in js], padding=True)
            cases.append({"k": "b", "is": is_, "js": js, "ids": e["input_ids"],
                          "am": [rle(a) for a in e["attention_mask"]]})
    # Decoding, by the backend tokenizer transformers built (tokenizer_config.json applied).
    backend = hf.backend_tokenizer
    backend.no_truncation()  # transformers leaves the last call's settings on the backend
    backend.no_padding()
    for i in rng.sample(range(len(texts)), 150):
        ids = backend.encode(texts[i]).ids
        for skip in (False, True):
            cases.append({"k": "d", "ids": ids, "skip": int(skip), "text": backend.decode(ids, skip_special_tokens=skip)})
    print(f"  {name}: {len(cases)} cases, tokenizers/transformers disagreements on defaults: {disagree}")
    return cases


def write_jsonl_gz(path, header, records):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as raw_f:
        # mtime=0: the same content gives the same bytes.
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw_f, mtime=0, compresslevel=9) as f:
            if header is not None:
                f.write((json.dumps(header, ensure_ascii=False) + "\n").encode())
            for r in records:
                f.write((json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n").encode())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/tokenizers"))
    ap.add_argument("--shared", default=os.environ.get("FTUNE_SHARED_DIR", os.path.join(ROOT, "..", "shared")))
    ap.add_argument("--minilm", default=os.environ.get("FTUNE_MINILM_DIR", os.path.join(ROOT, ".cache/models/all-MiniLM-L6-v2")))
    args = ap.parse_args()
    out = args.out
    shared_tok = os.path.join(args.shared, "fixtures", "tokenizers")

    texts, long_ids = build_corpus()
    rng = random.Random(7)
    pairs = build_pairs(texts, long_ids, rng)
    corpus_records = [{"t": t} for t in texts]
    write_jsonl_gz(os.path.join(out, "corpus.jsonl.gz"), None, corpus_records)
    corpus_sha = hashlib.sha256("\n".join(texts).encode("utf-8", "surrogatepass")).hexdigest()
    print(f"corpus: {len(texts)} texts, {len(pairs)} pairs, {sum(len(t.encode()) for t in texts)} bytes")

    # Tokenizer directories (committed ones are regenerated from scratch).
    os.makedirs(os.path.join(out, "minilm"), exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(args.minilm, f), os.path.join(out, "minilm", f))
    with tempfile.TemporaryDirectory() as work:
        train_roberta_bpe(texts, os.path.join(out, "roberta_bpe"))
        train_wordpiece_cased(texts, os.path.join(out, "wordpiece_cased"))
        train_unigram_precompiled(texts, os.path.join(out, "unigram_precompiled"), work)
        train_pipelines(texts, out)

        specs = {}
        for name in ("minilm", "roberta_bpe", "wordpiece_cased", "unigram_precompiled", "pipeline_a", "pipeline_b",
                     "pipeline_c"):
            d = os.path.join(out, name)
            specs[name] = {"dir": d, "file": os.path.join(d, "tokenizer.json"), "config": True, "source": "fixtures",
                           "scale": 1 if not name.startswith("pipeline") else 0.4}
        for name in ("gemma3", "llama2", "llama3"):
            f = os.path.join(shared_tok, name + ".tokenizer.json")
            if not os.path.exists(f):
                print(f"warning: {f} missing, no golden for {name}", file=sys.stderr)
                continue
            specs[name] = {"file": f, "config": False, "source": "shared", "scale": 1}
        llama2 = os.path.join(shared_tok, "llama2.tokenizer.json")
        if os.path.exists(llama2):
            d = os.path.join(work, "llama2_config")
            os.makedirs(d)
            shutil.copy(llama2, os.path.join(d, "tokenizer.json"))
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump(LLAMA2_CONFIG, f)
            specs["llama2_config"] = {"dir": d, "file": os.path.join(d, "tokenizer.json"), "config": True,
                                      "source": "shared+config", "scale": 0.15}

        versions = {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__,
                    "python_unicode": unicodedata.unidata_version}
        for name, spec in specs.items():
            cases = make_cases(name, spec, texts, pairs, long_ids, random.Random(zlib.crc32(name.encode())), spec["scale"])
            header = {"tokenizer": name, "source": spec["source"], "versions": versions, "corpus_sha256": corpus_sha,
                      "cases": len(cases)}
            if name == "llama2_config":
                header["tokenizer_config"] = LLAMA2_CONFIG
            write_jsonl_gz(os.path.join(out, "golden", name + ".jsonl.gz"), header, cases)
    unicode_probe(os.path.join(out, "unicode_probe.jsonl.gz"))


# ----------------------------------------------------------------------------------------------
# Unicode probe: how HF classes every code point


def ranges(codes):
    out = []
    for c in sorted(codes):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def unicode_probe(path):
    """Character classes and single-character mappings as HF's Rust code applies them, probed
    through the tokenizers API for every code point (tests/text/unicode_props_test.cc)."""
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    ws = pre_tokenizers.WhitespaceSplit()
    punct = pre_tokenizers.Punctuation()
    digits = pre_tokenizers.Digits(individual_digits=True)
    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
    strip_mn = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)
    strip_acc = normalizers.StripAccents()
    nfd = normalizers.NFD()
    word = Tokenizer(models.WordLevel({"[UNK]": 0, "x": 1}, unk_token="[UNK]"))
    word.add_tokens([AddedToken("x", single_word=True)])
    sets = {k: [] for k in ("whitespace", "punctuation", "bert_control", "bert_mn", "combining_mark", "numeric",
                            "rust_word")}
    for c in cps:
        ch = chr(c)
        if len(ws.pre_tokenize_str("a" + ch + "a")) == 2:
            sets["whitespace"].append(c)
        if len(punct.pre_tokenize_str("a" + ch + "a")) == 3:
            sets["punctuation"].append(c)
        if clean.normalize_str("a" + ch + "a") == "aa":
            sets["bert_control"].append(c)
        if nfd.normalize_str(ch) == ch and strip_mn.normalize_str("a" + ch) == "a":
            sets["bert_mn"].append(c)
        if strip_acc.normalize_str(ch) == "":
            sets["combining_mark"].append(c)
        if len(digits.pre_tokenize_str("a" + ch + "a")) == 3:
            sets["numeric"].append(c)
        if c != ord("x") and word.encode("x" + ch).ids != [1, 0]:
            sets["rust_word"].append(c)
    onig = {"onig_L": r"\p{L}", "onig_N": r"\p{N}", "onig_M": r"\p{M}", "onig_s": r"\s", "onig_w": r"\w",
            "onig_d": r"\d"}
    for key, pattern in onig.items():
        split = pre_tokenizers.Split(Regex(pattern), "isolated")
        sets[key] = [c for c in cps if c != 1 and len(split.pre_tokenize_str("\x01" + chr(c) + "\x01")) == 3]
    maps = {}
    for key, n in (("lowercase", normalizers.Lowercase()), ("nfd", normalizers.NFD()), ("nfkd", normalizers.NFKD()),
                   ("nfc", normalizers.NFC()), ("nfkc", normalizers.NFKC())):
        m = {}
        for c in cps:
            r = n.normalize_str(chr(c))
            if r != chr(c):
                m[str(c)] = r
        maps[key] = m
    record = {"tokenizers": tokenizers.__version__, "sets": {k: ranges(v) for k, v in sets.items()}, "maps": maps}
    write_jsonl_gz(path, None, [record])
    print(f"unicode probe: {', '.join(f'{k} {len(v)}' for k, v in sets.items())}")


# Llama-2 with a tokenizer_config.json: add_bos/add_eos are ignored next to a tokenizer.json
# (transformers 5), pad_token "<unk>" and model_max_length apply.
LLAMA2_CONFIG = {"add_bos_token": True, "add_eos_token": True, "bos_token": "<s>", "eos_token": "</s>",
                 "unk_token": "<unk>", "pad_token": "<unk>", "model_max_length": 4096,
                 "tokenizer_class": "PreTrainedTokenizerFast"}

if __name__ == "__main__":
    main()
