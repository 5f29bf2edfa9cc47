"""Random BERT classifiers and a synthetic pair task for the GPU kit's stages (kit_train.py,
kit_bench.py): models made on the machine that runs the kit, from a size, so nothing large is
carried. A model is a Hugging Face directory (config.json, model.safetensors in fp32, the MiniLM
WordPiece tokenizer of tests/fixtures) that ftune and transformers both load.

Sizes: tiny (hidden 64, 2 layers: end-to-end parity), minilm (all-MiniLM-L6-v2's shape: hidden
384, 6 layers, 12 heads), bert-base (hidden 768, 12 layers, 12 heads). Weights are N(0, 0.02)
with LayerNorm weights 1 and biases 0, as transformers initialises BERT; drawn with numpy where
it is installed (the GPU machine's PyTorch environment has it), else with Python's random module
(tiny only: seconds; bert-base would take minutes).
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


def write_random_bert(dir_, size, fixtures, seed=42, num_labels=2):
    """Writes the model directory; returns it. `fixtures` is the tests/fixtures directory."""
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
    os.makedirs(dir_, exist_ok=True)
    shapes = tensor_shapes(size, num_labels)
    header, offset = {}, 0
    for name, shape, _ in shapes:
        nbytes = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = os.path.join(dir_, "model.safetensors.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape, kind in shapes:
            blob = bytearray(_values(kind, math.prod(shape), draw))
            if name.endswith("word_embeddings.weight"):
                blob[0:4 * shape[1]] = bytes(4 * shape[1])  # padding_idx 0
            f.write(blob)
    os.replace(tmp, os.path.join(dir_, "model.safetensors"))
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
