"""Random classifiers and a synthetic pair task for the GPU kit's stages (kit_train.py,
kit_bench.py, kit_families.py): models made on the machine that runs the kit, from a size, so
nothing large is carried. A model is a Hugging Face directory (config.json, model.safetensors, the
MiniLM WordPiece tokenizer of tests/fixtures) that ftune and transformers both load.

BERT sizes: tiny (hidden 64, 2 layers: end-to-end parity), minilm (all-MiniLM-L6-v2's shape:
hidden 384, 6 layers, 12 heads), bert-base (hidden 768, 12 layers, 12 heads). Weights are
N(0, 0.02) with LayerNorm weights 1 and biases 0, as transformers initialises BERT; drawn with
numpy where it is installed (the GPU machine's PyTorch environment has it), else with Python's
random module (tiny only: seconds; bert-base would take minutes).

Other families (random_family): DeBERTa-v3-base, ModernBERT-base and Qwen2.5-0.5B from their
config.json on the Hub (the fields that shape the model), or a tiny variant of each for the CPU
selfcheck. Their parameter names and shapes come from transformers itself (the
*ForSequenceClassification class built on the meta device: no memory, no init), so they are what
the installed transformers saves; the weights are drawn as BERT's (norm weights 1, biases 0, the
rest N(0, 0.02)), stored as the Hub stores each model (fp32; the decoder in bf16). The tokenizer is
MiniLM's for every family (ids < 30522, inside every vocabulary here) without its fixed
truncation and padding, and the config's special-token ids are the tokenizer's ([PAD] 0, [CLS]
101, [SEP] 102), as a user sets a decoder's pad id from its tokenizer.
A decoder family also comes as a causal LM (causal_lm=True: its *ForCausalLM, the Hub's tying of
the head kept; Qwen2.5-0.5B's head is its embedding, 151936 x 896), for the causal_lm stage.
"""
import json
import math
import os
import random
import shutil
import struct

SIZES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                 max_position_embeddings=128),
    "minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                   intermediate_size=1536, max_position_embeddings=512),
    "bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072, max_position_embeddings=512),
}
VOCAB = 30522  # bert-base-uncased's, which the MiniLM tokenizer uses


def tensor_shapes(size, num_labels=2):
    """(name, shape, kind) of every parameter of BertForSequenceClassification; kind is "normal",
    "one" or "zero"."""
    s = SIZES[size]
    C, F, L, P = s["hidden_size"], s["intermediate_size"], s["num_hidden_layers"], \
        s["max_position_embeddings"]
    out = []
    e = "bert.embeddings."
    out += [(e + "word_embeddings.weight", [VOCAB, C], "normal"),
            (e + "position_embeddings.weight", [P, C], "normal"),
            (e + "token_type_embeddings.weight", [2, C], "normal"),
            (e + "LayerNorm.weight", [C], "one"), (e + "LayerNorm.bias", [C], "zero")]
    for l in range(L):
        p = "bert.encoder.layer.%d." % l
        for m in ("query", "key", "value"):
            out += [(p + "attention.self.%s.weight" % m, [C, C], "normal"),
                    (p + "attention.self.%s.bias" % m, [C], "zero")]
        out += [(p + "attention.output.dense.weight", [C, C], "normal"),
                (p + "attention.output.dense.bias", [C], "zero"),
                (p + "attention.output.LayerNorm.weight", [C], "one"),
                (p + "attention.output.LayerNorm.bias", [C], "zero"),
                (p + "intermediate.dense.weight", [F, C], "normal"),
                (p + "intermediate.dense.bias", [F], "zero"),
                (p + "output.dense.weight", [C, F], "normal"),
                (p + "output.dense.bias", [C], "zero"),
                (p + "output.LayerNorm.weight", [C], "one"),
                (p + "output.LayerNorm.bias", [C], "zero")]
    out += [("bert.pooler.dense.weight", [C, C], "normal"), ("bert.pooler.dense.bias", [C], "zero"),
            ("classifier.weight", [num_labels, C], "normal"),
            ("classifier.bias", [num_labels], "zero")]
    return out


def _values(kind, n, draw):
    if kind == "one":
        return struct.pack("<%df" % n, *([1.0] * n))
    if kind == "zero":
        return bytes(4 * n)
    return draw(n)


def _normal_draw(seed, size):
    """draw(n): n little-endian fp32 values of N(0, 0.02)."""
    try:
        import numpy as np
        rng = np.random.default_rng(seed)

        def draw(n):
            return (rng.standard_normal(n, dtype=np.float32) * np.float32(0.02)).astype("<f4").tobytes()
    except ImportError:
        if size != "tiny":
            raise RuntimeError("numpy is needed for a %s-sized model (python: no numpy)" % size)
        r = random.Random(seed)

        def draw(n):
            return struct.pack("<%df" % n, *[r.gauss(0.0, 0.02) for _ in range(n)])
    return draw


def _to_bf16(blob):
    """fp32 bytes rounded to bf16 (nearest even), as torch's .to(torch.bfloat16)."""
    import numpy as np
    u = np.frombuffer(bytes(blob), dtype="<u4")  # finite N(0, 0.02) values: no carry out
    return ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype("<u2").tobytes()


def _write_safetensors(dir_, shapes, draw, dtype="F32", zero_first_row=()):
    """dir_/model.safetensors from (name, shape, kind) and draw(n); written to a temporary name
    and renamed, so a model killed half-way is never taken for a whole one."""
    width = {"F32": 4, "BF16": 2}[dtype]
    header, offset = {}, 0
    for name, shape, _ in shapes:
        nbytes = width * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = os.path.join(dir_, "model.safetensors.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape, kind in shapes:
            blob = bytearray(_values(kind, math.prod(shape), draw))
            if name in zero_first_row:
                blob[0:4 * shape[1]] = bytes(4 * shape[1])  # padding_idx 0
            f.write(blob if dtype == "F32" else _to_bf16(blob))
    os.replace(tmp, os.path.join(dir_, "model.safetensors"))


def write_random_bert(dir_, size, fixtures, seed=42, num_labels=2):
    """Writes the model directory; returns it. `fixtures` is the tests/fixtures directory."""
    draw = _normal_draw(seed, size)
    os.makedirs(dir_, exist_ok=True)
    _write_safetensors(dir_, tensor_shapes(size, num_labels), draw,
                       zero_first_row=("bert.embeddings.word_embeddings.weight",))
    config = {"architectures": ["BertForSequenceClassification"], "model_type": "bert",
              "vocab_size": VOCAB, "type_vocab_size": 2, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
              "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0,
              "num_labels": num_labels,
              "id2label": {str(i): str(i) for i in range(num_labels)},
              "label2id": {str(i): i for i in range(num_labels)}, **SIZES[size]}
    with open(os.path.join(dir_, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(fixtures, "tokenizers", "minilm", name), os.path.join(dir_, name))
    return dir_


# The Hub's config.json of each family (microsoft/deberta-v3-base, answerdotai/ModernBERT-base,
# Qwen/Qwen2.5-0.5B: the fields that shape the model and its training), special-token ids set to
# the MiniLM tokenizer's. Dropout as each family fine-tunes by default.
PAD, CLS, SEP = 0, 101, 102
FAMILIES = {
    "deberta-v3-base": {
        "architectures": ["DebertaV2ForSequenceClassification"], "model_type": "deberta-v2",
        "vocab_size": 128100, "hidden_size": 768, "num_hidden_layers": 12,
        "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 512, "type_vocab_size": 0, "initializer_range": 0.02,
        "layer_norm_eps": 1e-7, "relative_attention": True, "max_relative_positions": -1,
        "position_buckets": 256, "norm_rel_ebd": "layer_norm", "share_att_key": True,
        "pos_att_type": ["p2c", "c2p"], "position_biased_input": False, "pad_token_id": PAD,
        "pooler_hidden_size": 768, "pooler_dropout": 0, "pooler_hidden_act": "gelu"},
    "modernbert-base": {
        "architectures": ["ModernBertForSequenceClassification"], "model_type": "modernbert",
        "vocab_size": 50368, "hidden_size": 768, "num_hidden_layers": 22,
        "num_attention_heads": 12, "intermediate_size": 1152, "hidden_activation": "gelu",
        "max_position_embeddings": 8192, "global_attn_every_n_layers": 3, "local_attention": 128,
        "global_rope_theta": 160000.0, "local_rope_theta": 10000.0, "norm_eps": 1e-5,
        "norm_bias": False, "attention_bias": False, "mlp_bias": False, "classifier_bias": False,
        "classifier_activation": "gelu", "classifier_pooling": "mean", "embedding_dropout": 0.0,
        "attention_dropout": 0.0, "mlp_dropout": 0.0, "classifier_dropout": 0.0,
        "initializer_range": 0.02, "initializer_cutoff_factor": 2.0,
        "pad_token_id": PAD, "bos_token_id": CLS, "cls_token_id": CLS, "eos_token_id": SEP,
        "sep_token_id": SEP},
    "qwen2.5-0.5b": {
        "architectures": ["Qwen2ForSequenceClassification"], "model_type": "qwen2",
        "vocab_size": 151936, "hidden_size": 896, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864,
        "hidden_act": "silu", "max_position_embeddings": 32768, "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "use_sliding_window": False,
        "sliding_window": None, "max_window_layers": 21, "attention_dropout": 0.0,
        "initializer_range": 0.02, "pad_token_id": PAD, "bos_token_id": CLS,
        "eos_token_id": SEP, "torch_dtype": "bfloat16"},
}
# The CPU selfcheck's variants: the same families, a few layers of width 64 (ModernBERT: a local
# window of 16 tokens, so windows act at the smoke length), vocabularies cut to the tokenizer's.
TINY = {
    "deberta-v3-base": dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=128, pooler_hidden_size=64),
    "modernbert-base": dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=3,
                            num_attention_heads=4, intermediate_size=96, local_attention=16),
    "qwen2.5-0.5b": dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=128),
}
STORED = {"qwen2.5-0.5b": "BF16"}  # the Hub's Qwen2.5 is stored in bf16, the encoders in fp32
# Families whose HF forward takes no token types (their tokenizers return none).
NO_TOKEN_TYPES = ("modernbert", "qwen2")


def family_config(family, tiny=False, num_labels=2, causal_lm=False):
    cfg = dict(FAMILIES[family], **(TINY[family] if tiny else {}))
    if causal_lm:
        arch = cfg["architectures"][0]
        if not arch.endswith("ForSequenceClassification") or cfg["model_type"] not in ("qwen2",):
            raise ValueError("%s has no causal-LM variant here" % family)
        cfg["architectures"] = [arch.replace("ForSequenceClassification", "ForCausalLM")]
        return cfg
    cfg.update({"num_labels": num_labels, "id2label": {str(i): str(i) for i in range(num_labels)},
                "label2id": {str(i): i for i in range(num_labels)}})
    return cfg


def hf_parameter_shapes(config):
    """(name, shape, kind) of every parameter of the config's architecture (*ForSequenceClassification
    or *ForCausalLM), as the installed transformers names them (built on the meta device: nothing
    allocated; a tied head is the embedding's parameter, listed once, as the Hub stores it)."""
    import torch
    import transformers
    fields = {k: v for k, v in config.items() if k not in ("architectures", "model_type",
                                                          "torch_dtype")}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **fields)
    cls = getattr(transformers, config["architectures"][0])
    with torch.device("meta"):
        model = cls(hf_config)
    out = []
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        kind = ("zero" if leaf == "bias" else
                "one" if p.dim() == 1 and "norm" in name.lower() else "normal")
        out.append((name, list(p.shape), kind))
    return out


def write_random_family(dir_, family, fixtures, tiny=False, seed=42, num_labels=2,
                        causal_lm=False):
    """Writes a random model of `family` (FAMILIES) to dir_; returns it."""
    config = family_config(family, tiny, num_labels, causal_lm)
    shapes = hf_parameter_shapes(config)
    os.makedirs(dir_, exist_ok=True)
    with open(os.path.join(dir_, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    src = os.path.join(fixtures, "tokenizers", "minilm")
    with open(os.path.join(src, "tokenizer.json")) as f:
        tok = json.load(f)
    tok["truncation"] = tok["padding"] = None  # max_length alone decides, on both sides
    with open(os.path.join(dir_, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    with open(os.path.join(src, "tokenizer_config.json")) as f:
        tok_config = json.load(f)
    tok_config["model_max_length"] = max(tok_config.get("model_max_length", 0), 8192)
    if config["model_type"] in NO_TOKEN_TYPES:
        tok_config["model_input_names"] = ["input_ids", "attention_mask"]
    with open(os.path.join(dir_, "tokenizer_config.json"), "w") as f:
        json.dump(tok_config, f, indent=1)
    # Last: random_family takes a directory with model.safetensors for a whole model.
    _write_safetensors(dir_, shapes, _normal_draw(seed, "tiny" if tiny else family),
                       STORED.get(family, "F32"))
    return dir_


def random_family(family, fixtures, root, tiny=False, causal_lm=False):
    """root/<family>[-clm][-tiny], written on first use (as random_bert)."""
    path = os.path.join(root, family + ("-clm" if causal_lm else "") + ("-tiny" if tiny else ""))
    if not os.path.exists(os.path.join(path, "model.safetensors")):
        write_random_family(path, family, fixtures, tiny, causal_lm=causal_lm)
    return path


def random_bert(size, fixtures, root):
    """root/<size>, written on first use: the stages of one kit run share their models (run.sh
    passes the directory as FTUNE_KIT_MODELS)."""
    path = os.path.join(root, size)
    if not os.path.exists(os.path.join(path, "model.safetensors")):
        write_random_bert(path, size, fixtures)
    return path


def write_pair_task(path, n, seed):
    """The tiny-model tests' task: label 1 when the pair says "good", 0 when it says "bad"."""
    words = ["red", "green", "car", "house", "bird", "apple", "river", "chair", "book", "cloud"]
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            good = rng.random() < 0.5
            text = " ".join(["the"] + [rng.choice(words) for _ in range(rng.randint(1, 12))])
            pair = " ".join(["good" if good else "bad"] + [rng.choice(words)
                                                          for _ in range(rng.randint(0, 8))])
            f.write(json.dumps({"text": text, "text_pair": pair, "label": int(good)}) + "\n")
