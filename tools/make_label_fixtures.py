#!/usr/bin/env python3
"""Label names through config.json, as transformers writes and reads them (tests/fixtures/labels/).

    python tools/make_label_fixtures.py            # writes tests/fixtures/labels/*.config.json:
                                                   # transformers' config.json of the engine BERT
                                                   # with label names that look like integers
    python tools/make_label_fixtures.py --check DIR...
        # DIR: a model directory ftune saved (e.g. runs/x/model). transformers must load it with
        # the same id -> name map, and save_pretrained must write id2label / label2id exactly as
        # ftune did: the labels round-trip. Exits 1 otherwise.

The C++ side (tests/models/label_config_test.cc) reads the written files and checks that ftune
reads the same names in id order and writes the same two maps back.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import transformers
from transformers import AutoConfig, AutoModelForSequenceClassification

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "fixtures" / "labels"
CASES = {"numeric_1_2": ["1", "2"], "minus_one_zero_one": ["-1", "0", "1"]}


def write():
    OUT.mkdir(parents=True, exist_ok=True)
    for name, labels in CASES.items():
        cfg = AutoConfig.from_pretrained(REPO / "tests" / "fixtures" / "engine" / "bert_pair" / "model")
        cfg.id2label = dict(enumerate(labels))
        cfg.label2id = {label: i for i, label in enumerate(labels)}
        with tempfile.TemporaryDirectory() as d:
            cfg.save_pretrained(d)
            j = json.loads((Path(d) / "config.json").read_text())
        (OUT / f"{name}.config.json").write_text(json.dumps(j, indent=2))
        print(f"{name}: id2label {j['id2label']} label2id {j['label2id']} "
              f"(transformers {transformers.__version__})")


def check(dirs):
    ok = True
    for d in dirs:
        ours = json.loads((Path(d) / "config.json").read_text())
        model = AutoModelForSequenceClassification.from_pretrained(d)
        want = {int(k): v for k, v in ours["id2label"].items()}
        same_read = model.config.id2label == want and model.config.label2id == ours["label2id"]
        with tempfile.TemporaryDirectory() as t:
            model.config.save_pretrained(t)
            back = json.loads((Path(t) / "config.json").read_text())
        same_written = back["id2label"] == ours["id2label"] and back["label2id"] == ours["label2id"]
        ok &= same_read and same_written and model.config.num_labels == len(want)
        print(f"{d}: transformers reads id2label {model.config.id2label} "
              f"({'same' if same_read else 'DIFFERENT'}), writes it back "
              f"{'identically' if same_written else 'DIFFERENTLY: ' + str(back['id2label'])}")
    print("OK" if ok else "FAILED")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", nargs="+", help="model directories ftune saved")
    a = ap.parse_args()
    if a.check:
        sys.exit(0 if check(a.check) else 1)
    write()


if __name__ == "__main__":
    main()
